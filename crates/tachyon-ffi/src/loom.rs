//! The one switch to loom: the topic handle's ledger ([`crate::ledger`])
//! imports its atomics from here. In a normal build they are `std`'s;
//! under `--cfg tachyon_loom` they are `loom`'s, so the ledger can be
//! model-checked (`cargo test -p tachyon-ffi --release --lib -- loom` with
//! `RUSTFLAGS="--cfg tachyon_loom"`).

#[cfg(tachyon_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(tachyon_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
