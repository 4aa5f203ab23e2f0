//! Bridges tachyon topics and `RpcBuffer` channels across machines through
//! [Zenoh](https://zenoh.io).
//!
//! Shared memory ends at the machine's edge. A bridge process on each host
//! forwards chosen topics out to Zenoh key expressions (one Zenoh publisher
//! per route), brings key expressions in to local topics, serves local RPC
//! channels as Zenoh queryables, and offers remote queryables as local RPC
//! channels. An out route reads its topic through a consumer group of its
//! own (`"tachyon-bridge"` unless the route names one, see
//! [`config::OutRoute`]), so local consumers keep getting every message.
//! Per-key order, at-most-once / at-least-once delivery across a bridge
//! restart, loop avoidance and RPC failure rules are described in
//! `docs/bridge.md`.
//!
//! Usually it runs as the `tachyon-bridge` binary with a TOML file; the
//! library is the same thing, for embedding:
//!
//! ```no_run
//! use tachyon_bridge::{Bridge, Config};
//!
//! let config = Config::from_toml(
//!     r#"
//!     [zenoh]
//!     listen = ["tcp/0.0.0.0:7447"]
//!
//!     [[out]]                 # local topic -> Zenoh
//!     region = "md"           # a region with group slots
//!     topic = "quotes"
//!     key = "site-a/md/quotes"
//!     group = "to-site-b"     # default "tachyon-bridge"
//!
//!     [[in]]                  # Zenoh -> local topic
//!     key = "site-b/md/orders"
//!     region = "md"
//!     topic = "orders"
//!     partitions = 4
//!     "#,
//!     "example",
//! )?;
//! let bridge = Bridge::start(&config)?;
//! // ... until asked to stop:
//! let stats = bridge.stop();
//! println!("{stats}");
//! # Ok::<(), tachyon_bridge::BridgeError>(())
//! ```
//!
//! Bad configuration is an error that names the field:
//!
//! ```
//! use tachyon_bridge::Config;
//! let err = Config::from_toml("[[out]]\nregion = \"md\"\ntopic = \"q\"\nkey = \"a/**\"\n", "example")
//!     .unwrap_err();
//! assert!(err.to_string().contains("out[0].key"));
//! ```

mod bridge;
pub mod config;
mod error;
pub mod wire;

pub use bridge::{zenoh_config, Bridge, Stats};
pub use config::Config;
pub use error::{BridgeError, Result};
