//! `tracing` events, when the crate's `tracing` feature is on; nothing at
//! all (not even the evaluation of the fields) when it is off.
//!
//! Call sites write one line, with no `#[cfg]`:
//!
//! ```text
//! trace::event!(warn, "tachyon::corrupt", what = %what, "shared memory is corrupt");
//! ```
//!
//! The level is one of `tracing`'s macro names (`error`, `warn`, `info`,
//! `debug`, `trace`), the target a string literal naming the kind of event;
//! the rest is passed to `tracing` as written. The targets in use, and their
//! fields, are listed in the crate documentation (section "Features").
//! A value used only by an event is unused without the feature: call sites
//! pass values they use anyway.

/// Emits a `tracing` event at `$level` with target `$target`.
#[cfg(feature = "tracing")]
macro_rules! event {
    ($level:ident, $target:literal, $($rest:tt)+) => {
        ::tracing::$level!(target: $target, $($rest)+)
    };
}

/// Without the `tracing` feature: nothing.
#[cfg(not(feature = "tracing"))]
macro_rules! event {
    ($level:ident, $target:literal, $($rest:tt)+) => {};
}

pub(crate) use event;

/// A robust lock whose holder died, taken over or cleared: target
/// `tachyon::lock`, level WARN, fields `slot` and `gen` (the dead holder's
/// attach slot and its generation), and `$what` as the message.
macro_rules! owner_died {
    ($holder:expr, $what:literal) => {
        $crate::platform::trace::event!(
            warn,
            "tachyon::lock",
            slot = $holder.slot(),
            gen = $holder.gen(),
            $what
        )
    };
}

/// A ring cell left claimed by a dead claimant, about to be repaired:
/// target `tachyon::ring`, level INFO, fields `slot`, `gen` (the dead
/// claimant), `pos` (the ring position) and `writer_side` (whether a
/// writer is the one blocked).
// Under loom the ring is built only for its models (tests).
#[cfg_attr(all(tachyon_loom, not(test)), allow(unused_macros))]
macro_rules! ring_repair {
    ($holder:expr, $pos:expr, $writer_side:expr) => {
        $crate::platform::trace::event!(
            info,
            "tachyon::ring",
            slot = $holder.slot(),
            gen = $holder.gen(),
            pos = $pos,
            writer_side = $writer_side,
            "repairing the cell of a dead claimant"
        )
    };
}

/// A ring cell or cursor found damaged (a word no step of the protocol
/// writes) and repaired: target `tachyon::ring`, level WARN, fields `from`
/// (the damaged word) and `to` (what it was set to).
#[cfg_attr(all(tachyon_loom, not(test)), allow(unused_macros))]
macro_rules! ring_damage {
    ($from:expr, $to:expr) => {
        $crate::platform::trace::event!(
            warn,
            "tachyon::ring",
            from = $from,
            to = $to,
            "repairing a damaged ring cell or cursor"
        )
    };
}

pub(crate) use owner_died;
#[cfg_attr(all(tachyon_loom, not(test)), allow(unused_imports))]
pub(crate) use ring_damage;
#[cfg_attr(all(tachyon_loom, not(test)), allow(unused_imports))]
pub(crate) use ring_repair;
