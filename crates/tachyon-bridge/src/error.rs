//! The bridge's error type.

use std::path::PathBuf;

/// What can go wrong when configuring or running a bridge.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The configuration file could not be read.
    #[error("cannot read the configuration file {path}: {source}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML, or a field has the wrong
    /// type or an unknown name (the message names it).
    #[error("configuration {origin}: {message}")]
    ParseConfig {
        /// The file, or "from flags".
        origin: String,
        /// The parser's message, which names the field and its line.
        message: String,
    },
    /// A field has a value the bridge cannot use.
    #[error("configuration field `{field}`: {why}")]
    InvalidConfig {
        /// The field, as a path (`out[2].key`).
        field: String,
        /// What is wrong and what is expected.
        why: String,
    },
    /// Zenoh refused something (opening the session, a declaration, a key
    /// expression).
    #[error("zenoh: {0}")]
    Zenoh(String),
    /// An error from tachyon (a region, a topic, an RPC channel).
    #[error(transparent)]
    Tachyon(#[from] tachyon::Error),
}

impl BridgeError {
    pub(crate) fn invalid(field: impl Into<String>, why: impl Into<String>) -> Self {
        BridgeError::InvalidConfig { field: field.into(), why: why.into() }
    }

    pub(crate) fn zenoh(context: &str, e: impl std::fmt::Display) -> Self {
        BridgeError::Zenoh(format!("{context}: {e}"))
    }
}

/// The bridge's result type.
pub type Result<T, E = BridgeError> = std::result::Result<T, E>;
