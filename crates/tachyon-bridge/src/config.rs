//! The bridge's configuration: a TOML file (see `docs/bridge.md` for the
//! reference), flags added on top by the binary, validated before anything
//! starts so that a mistake is an error naming its field.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{BridgeError, Result};

/// The whole configuration of one bridge process.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// A name for this bridge in logs and statistics (default: the host
    /// name and process id). Not used for loop detection: each run draws a
    /// random 64-bit id for that.
    #[serde(default)]
    pub name: Option<String>,
    /// How the Zenoh session is opened.
    #[serde(default)]
    pub zenoh: ZenohConfig,
    /// Local topics forwarded to Zenoh.
    #[serde(default, rename = "out")]
    pub outgoing: Vec<OutRoute>,
    /// Zenoh key expressions forwarded into local topics.
    #[serde(default, rename = "in")]
    pub incoming: Vec<InRoute>,
    /// Local `RpcBuffer` channels served to Zenoh as queryables.
    #[serde(default)]
    pub rpc_serve: Vec<RpcServeRoute>,
    /// Zenoh queryables offered locally as `RpcBuffer` servers.
    #[serde(default)]
    pub rpc_call: Vec<RpcCallRoute>,
}

/// The Zenoh session.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZenohConfig {
    /// `"peer"` (default), `"client"` or `"router"`.
    #[serde(default = "default_mode")]
    pub mode: String,
    /// Endpoints to listen on, e.g. `"tcp/10.0.0.1:7447"`.
    #[serde(default)]
    pub listen: Vec<String>,
    /// Endpoints to connect to (retried until they answer, and again after
    /// a link is lost).
    #[serde(default)]
    pub connect: Vec<String>,
    /// Multicast scouting (UDP discovery of peers on the LAN). Off by
    /// default: a bridge connects where it is told to.
    #[serde(default)]
    pub multicast_scouting: bool,
    /// The Zenoh link lease in milliseconds: a silent peer is declared gone
    /// after this long (Zenoh's default, 10000, when unset).
    #[serde(default)]
    pub lease_ms: Option<u64>,
}

impl Default for ZenohConfig {
    fn default() -> Self {
        ZenohConfig {
            mode: default_mode(),
            listen: Vec::new(),
            connect: Vec::new(),
            multicast_scouting: false,
            lease_ms: None,
        }
    }
}

fn default_mode() -> String {
    "peer".to_owned()
}

/// A local topic forwarded to a Zenoh key expression.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutRoute {
    /// The region's name.
    pub region: String,
    /// The topic's name.
    pub topic: String,
    /// The Zenoh key expression the messages are published on (no
    /// wildcards).
    pub key: String,
    /// The partitions to forward (default: all). The route's group gets
    /// the messages of every partition: those it does not forward must be
    /// read by another member of the group (another bridge with the same
    /// `group` forwarding them), or they fill the group's rings and hold
    /// the producers back (the bridge warns at start).
    #[serde(default)]
    pub partitions: Option<Vec<u32>>,
    /// The consumer group the route reads the topic through (default
    /// [`DEFAULT_GROUP`], `"tachyon-bridge"`). A group of its own gets
    /// every message published to the topic after it was first joined,
    /// while local consumers (the default group, other groups) keep
    /// getting every message too. The region needs group slots
    /// (`RegionConfig::max_groups` of at least 2): a route whose region has
    /// none is refused with an error that says so (no silent fallback; see
    /// `default_group`). The group outlives a killed or stopped bridge for
    /// the region's `group_lease`: a bridge restarted with the same group
    /// within it goes on where the last one left. Two bridge processes
    /// with the same group on one topic share its messages (each goes
    /// through one of them); give each its own group to forward a topic to
    /// two places.
    #[serde(default)]
    pub group: Option<String>,
    /// Read the topic through its default group instead (`Topic::receive`,
    /// default `false`): the bridge is then one more consumer of it and
    /// competes with local consumers of the default group (each message
    /// goes either to them or to the bridge). For regions without group
    /// slots. Not with `group`.
    #[serde(default)]
    pub default_group: bool,
    /// At-least-once topics: messages sent per acknowledged batch
    /// (default 64, 1 to 4096).
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// At-most-once topics: up to this many messages of one partition that
    /// are queued together go out as one Zenoh sample (default 1, 1 to
    /// 4096). 1 publishes every message as a sample of its own, with the
    /// message as its payload, which a plain Zenoh subscriber reads too.
    /// Above 1, the far side must be a `tachyon-bridge`: it unpacks the
    /// batch (a plain subscriber would get the batch's framing). The bridge
    /// never waits to fill a batch: it takes what is queued when it sends,
    /// so a lone message goes at once (as a sample of its own) and batches
    /// form only under load, where they save Zenoh's per-sample cost.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// At-least-once topics: how long to wait for the far side's
    /// acknowledgement before sending the batch again (default 2000 ms).
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u64,
}

/// The consumer group an out route reads through unless it names one
/// ([`OutRoute::group`]) or asks for the topic's default group.
pub const DEFAULT_GROUP: &str = "tachyon-bridge";

/// Group slots of a region an in route creates unless it says
/// ([`InRoute::max_groups`]): the default group and three named ones.
pub const DEFAULT_MAX_GROUPS: usize = 4;

fn default_max_batch() -> usize {
    64
}

fn default_batch() -> usize {
    1
}

fn default_ack_timeout_ms() -> u64 {
    2000
}

/// A Zenoh key expression forwarded into a local topic.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InRoute {
    /// The Zenoh key expression subscribed to (wildcards allowed).
    pub key: String,
    /// The region's name (created with `region_size` if it does not exist).
    pub region: String,
    /// The topic's name (created with `partitions`, `capacity` and
    /// `delivery` if it does not exist).
    pub topic: String,
    /// Bytes of the region if the bridge creates it (default 64 MiB).
    #[serde(default)]
    pub region_size: Option<usize>,
    /// Consumer-group slots per topic (`RegionConfig::max_groups`, the
    /// default group included: 0 to 63) if the bridge creates the region
    /// (default [`DEFAULT_MAX_GROUPS`], 4): local consumer groups read the
    /// imported messages, each group every message, and the message
    /// crosses the network once whatever their number. Each slot costs
    /// every chunk of the region's pool 8 bytes and every topic one ring
    /// per partition, out of the region's 4 MiB ring arena (create the
    /// region yourself for many groups of many large topics).
    #[serde(default)]
    pub max_groups: Option<usize>,
    /// Partitions of the topic if the bridge creates it (default 1).
    #[serde(default)]
    pub partitions: Option<u32>,
    /// Capacity per partition if the bridge creates the topic (default:
    /// tachyon's).
    #[serde(default)]
    pub capacity: Option<u32>,
    /// `"at-most-once"` (default) or `"at-least-once"`, if the bridge
    /// creates the topic.
    #[serde(default)]
    pub delivery: Option<String>,
    /// Whether the topic has its default group, if the bridge creates it
    /// (`TopicConfig::default_group`, default `true`). Set `false` for a
    /// topic that only named consumer groups read: a default group that
    /// nobody reads fills up and then holds the route back (and with it
    /// the Zenoh link). Needs `max_groups` of at least 1.
    #[serde(default)]
    pub default_group: Option<bool>,
}

/// A local `RpcBuffer` channel (its server is a local process) answered
/// to Zenoh `get`s on a key expression: the bridge is the channel's client.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RpcServeRoute {
    /// The local channel's name.
    pub channel: String,
    /// The key expression of the queryable (no wildcards).
    pub key: String,
    /// How long a call may take locally (default 5000 ms).
    #[serde(default = "default_rpc_timeout_ms")]
    pub timeout_ms: u64,
}

/// A Zenoh queryable offered to local clients as an `RpcBuffer` server:
/// the bridge creates the channel and turns each request into a `get`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RpcCallRoute {
    /// The key expression to query (no wildcards).
    pub key: String,
    /// The local channel the bridge creates and serves.
    pub channel: String,
    /// How long to wait for the far side's reply (default 5000 ms).
    #[serde(default = "default_rpc_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_rpc_timeout_ms() -> u64 {
    5000
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| BridgeError::ReadConfig { path: path.to_owned(), source })?;
        Config::from_toml(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config> {
        let config: Config = toml::from_str(text)
            .map_err(|e| BridgeError::ParseConfig { origin: origin.to_owned(), message: e.to_string() })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        if !["peer", "client", "router"].contains(&self.zenoh.mode.as_str()) {
            return Err(BridgeError::invalid(
                "zenoh.mode",
                format!("{:?} is not a Zenoh mode: use \"peer\", \"client\" or \"router\"", self.zenoh.mode),
            ));
        }
        for (field, list) in [("zenoh.listen", &self.zenoh.listen), ("zenoh.connect", &self.zenoh.connect)] {
            for (i, ep) in list.iter().enumerate() {
                if !ep.contains('/') {
                    return Err(BridgeError::invalid(
                        format!("{field}[{i}]"),
                        format!("{ep:?} is not a Zenoh endpoint: write PROTOCOL/ADDRESS, e.g. \"tcp/10.0.0.1:7447\""),
                    ));
                }
            }
        }
        if self.zenoh.lease_ms == Some(0) {
            return Err(BridgeError::invalid("zenoh.lease_ms", "must be above 0"));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, r) in self.outgoing.iter().enumerate() {
            let at = |f: &str| format!("out[{i}].{f}");
            check_name(&at("region"), &r.region)?;
            check_name(&at("topic"), &r.topic)?;
            check_key(&at("key"), &r.key, false)?;
            if let Some(parts) = &r.partitions {
                if parts.is_empty() {
                    return Err(BridgeError::invalid(
                        at("partitions"),
                        "is empty: leave it out to forward all",
                    ));
                }
                if let Some(p) = parts.iter().find(|p| **p >= 256) {
                    return Err(BridgeError::invalid(
                        at("partitions"),
                        format!("{p} is not a partition (0 to 255)"),
                    ));
                }
            }
            if !(1..=4096).contains(&r.max_batch) {
                return Err(BridgeError::invalid(
                    at("max_batch"),
                    format!("{} is not in 1 to 4096", r.max_batch),
                ));
            }
            if !(1..=4096).contains(&r.batch) {
                return Err(BridgeError::invalid(at("batch"), format!("{} is not in 1 to 4096", r.batch)));
            }
            if r.ack_timeout_ms == 0 {
                return Err(BridgeError::invalid(at("ack_timeout_ms"), "must be above 0"));
            }
            if let Some(g) = &r.group {
                if r.default_group {
                    return Err(BridgeError::invalid(
                        at("group"),
                        format!(
                            "{g:?} with `default_group = true`: a route reads through its own group or through \
                             the topic's default group, not both"
                        ),
                    ));
                }
                if g.is_empty() || g.len() > 64 || g.contains('\0') {
                    return Err(BridgeError::invalid(
                        at("group"),
                        format!("{g:?} is not a group name: 1 to 64 bytes without NUL"),
                    ));
                }
            }
            if !seen.insert((r.region.clone(), r.topic.clone())) {
                return Err(BridgeError::invalid(
                    at("topic"),
                    format!(
                        "topic {:?} of region {:?} is forwarded by an earlier route too: one route per topic \
                         (list its partitions in one route)",
                        r.topic, r.region
                    ),
                ));
            }
        }
        for (i, r) in self.incoming.iter().enumerate() {
            let at = |f: &str| format!("in[{i}].{f}");
            check_key(&at("key"), &r.key, true)?;
            check_name(&at("region"), &r.region)?;
            check_name(&at("topic"), &r.topic)?;
            if let Some(p) = r.partitions {
                if !p.is_power_of_two() || p > 256 {
                    return Err(BridgeError::invalid(
                        at("partitions"),
                        format!("{p} is not a power of two from 1 to 256"),
                    ));
                }
            }
            if let Some(c) = r.capacity {
                if !c.is_power_of_two() || !(2..=1 << 20).contains(&c) {
                    return Err(BridgeError::invalid(
                        at("capacity"),
                        format!("{c} is not a power of two from 2 to 2^20"),
                    ));
                }
            }
            if let Some(g) = r.max_groups {
                if g > tachyon::bus::MAX_GROUPS {
                    return Err(BridgeError::invalid(
                        at("max_groups"),
                        format!("{g} is not in 0 to {}", tachyon::bus::MAX_GROUPS),
                    ));
                }
                if g == 0 && r.default_group == Some(false) {
                    return Err(BridgeError::invalid(
                        at("default_group"),
                        "a topic without its default group needs group slots: max_groups of at least 1",
                    ));
                }
            }
            if let Some(d) = &r.delivery {
                parse_delivery(d).ok_or_else(|| {
                    BridgeError::invalid(
                        at("delivery"),
                        format!("{d:?}: use \"at-most-once\" or \"at-least-once\""),
                    )
                })?;
            }
        }
        let mut channels = std::collections::HashSet::new();
        for (i, r) in self.rpc_serve.iter().enumerate() {
            check_name(&format!("rpc_serve[{i}].channel"), &r.channel)?;
            check_key(&format!("rpc_serve[{i}].key"), &r.key, false)?;
            if r.timeout_ms == 0 {
                return Err(BridgeError::invalid(format!("rpc_serve[{i}].timeout_ms"), "must be above 0"));
            }
        }
        for (i, r) in self.rpc_call.iter().enumerate() {
            check_name(&format!("rpc_call[{i}].channel"), &r.channel)?;
            check_key(&format!("rpc_call[{i}].key"), &r.key, false)?;
            if r.timeout_ms == 0 {
                return Err(BridgeError::invalid(format!("rpc_call[{i}].timeout_ms"), "must be above 0"));
            }
            if !channels.insert(r.channel.clone()) {
                return Err(BridgeError::invalid(
                    format!("rpc_call[{i}].channel"),
                    format!("channel {:?} is created by an earlier rpc_call route", r.channel),
                ));
            }
        }
        Ok(())
    }

    /// The bridge's display name.
    pub fn display_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("{}:{}", host.trim(), std::process::id())
        })
    }
}

impl OutRoute {
    /// The acknowledgement timeout.
    pub fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }

    /// The consumer group the route reads through: `None` for the topic's
    /// default group (`default_group = true`), else `group` or
    /// [`DEFAULT_GROUP`].
    pub fn group_name(&self) -> Option<&str> {
        if self.default_group {
            None
        } else {
            Some(self.group.as_deref().unwrap_or(DEFAULT_GROUP))
        }
    }
}

pub(crate) fn parse_delivery(s: &str) -> Option<tachyon::bus::Delivery> {
    match s {
        "at-most-once" => Some(tachyon::bus::Delivery::AtMostOnce),
        "at-least-once" => Some(tachyon::bus::Delivery::AtLeastOnce),
        _ => None,
    }
}

fn check_name(field: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 64 || name.contains('/') || name.contains('\0') {
        return Err(BridgeError::invalid(field, format!("{name:?} is not a name: 1 to 64 bytes, no '/'")));
    }
    Ok(())
}

fn check_key(field: &str, key: &str, wildcards: bool) -> Result<()> {
    let ke = zenoh::key_expr::KeyExpr::try_from(key)
        .map_err(|e| BridgeError::invalid(field, format!("{key:?} is not a Zenoh key expression: {e}")))?;
    if !wildcards && (ke.as_str().contains('*') || ke.as_str().contains('$')) {
        return Err(BridgeError::invalid(
            field,
            format!("{key:?}: no wildcards here (a route publishes on one key)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let c = Config::from_toml(
            r#"
            name = "a"
            [zenoh]
            listen = ["tcp/127.0.0.1:7447"]
            [[out]]
            region = "md"
            topic = "quotes"
            key = "md/quotes"
            partitions = [0, 1]
            [[in]]
            key = "md/**"
            region = "md2"
            topic = "quotes"
            partitions = 4
            delivery = "at-least-once"
            [[rpc_serve]]
            channel = "calc"
            key = "rpc/calc"
            [[rpc_call]]
            key = "rpc/other"
            channel = "other"
            timeout_ms = 100
            "#,
            "test",
        )
        .unwrap();
        assert_eq!(c.outgoing[0].partitions, Some(vec![0, 1]));
        assert_eq!(c.incoming[0].partitions, Some(4));
        assert_eq!(c.rpc_call[0].timeout_ms, 100);
        assert!(!c.zenoh.multicast_scouting);
    }

    fn err(text: &str) -> String {
        Config::from_toml(text, "test").unwrap_err().to_string()
    }

    #[test]
    fn bad_fields_are_named() {
        let e = err("[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a/*\"\n");
        assert!(e.contains("out[0].key") && e.contains("wildcards"), "{e}");
        let e = err("[[in]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\npartitions = 3\n");
        assert!(e.contains("in[0].partitions"), "{e}");
        let e = err("[[in]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\ndelivery = \"twice\"\n");
        assert!(e.contains("in[0].delivery"), "{e}");
        let e = err("[zenoh]\nmode = \"hub\"\n");
        assert!(e.contains("zenoh.mode"), "{e}");
        let e = err("[zenoh]\nlisten = [\"7447\"]\n");
        assert!(e.contains("zenoh.listen[0]"), "{e}");
        let e = err("[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\nmax_batch = 0\n");
        assert!(e.contains("out[0].max_batch"), "{e}");
        let e = err("[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\nbatch = 5000\n");
        assert!(e.contains("out[0].batch"), "{e}");
        let e = err("[[out]]\nregion = \"\"\ntopic = \"q\"\nkey = \"a\"\n");
        assert!(e.contains("out[0].region"), "{e}");
    }

    #[test]
    fn unknown_and_missing_fields_are_named() {
        let e = err("[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\npartition = [1]\n");
        assert!(e.contains("partition"), "{e}");
        let e = err("[[out]]\nregion = \"md\"\nkey = \"a\"\n");
        assert!(e.contains("topic"), "{e}");
        let e = err("[[out]]\nregion = 3\ntopic = \"q\"\nkey = \"a\"\n");
        assert!(e.contains("region"), "{e}");
    }

    #[test]
    fn an_out_route_reads_through_its_own_group_unless_told() {
        let c = Config::from_toml(
            "[[out]]\nregion = \"md\"\ntopic = \"a\"\nkey = \"a\"\n\
             [[out]]\nregion = \"md\"\ntopic = \"b\"\nkey = \"b\"\ngroup = \"to-site-b\"\n\
             [[out]]\nregion = \"md\"\ntopic = \"c\"\nkey = \"c\"\ndefault_group = true\n",
            "test",
        )
        .unwrap();
        let groups: Vec<_> = c.outgoing.iter().map(OutRoute::group_name).collect();
        assert_eq!(groups, [Some(DEFAULT_GROUP), Some("to-site-b"), None]);
        let e = err(
            "[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\ngroup = \"g\"\ndefault_group = true\n",
        );
        assert!(e.contains("out[0].group") && e.contains("not both"), "{e}");
        let e = err("[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\ngroup = \"\"\n");
        assert!(e.contains("out[0].group"), "{e}");
    }

    #[test]
    fn in_route_group_slots_are_checked() {
        let e = err("[[in]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\nmax_groups = 64\n");
        assert!(e.contains("in[0].max_groups"), "{e}");
        let e = err(
            "[[in]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\nmax_groups = 0\ndefault_group = false\n",
        );
        assert!(e.contains("in[0].default_group"), "{e}");
        let c = Config::from_toml(
            "[[in]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\nmax_groups = 3\ndefault_group = false\n",
            "test",
        )
        .unwrap();
        assert_eq!((c.incoming[0].max_groups, c.incoming[0].default_group), (Some(3), Some(false)));
    }

    #[test]
    fn one_route_per_topic() {
        let e = err(
            "[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a\"\n[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"b\"\n",
        );
        assert!(e.contains("out[1].topic"), "{e}");
    }
}
