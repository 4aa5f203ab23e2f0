//! Attach tokens: which attachment of a segment holds something, and
//! whether it is still alive.
//!
//! Each open handle of a segment owns an attach slot; a [`Token`] is the
//! index of that slot plus the slot's generation. A slot is reused only
//! after its previous occupant is gone, and reuse bumps the generation, so
//! a token names one attachment for ever. Shared structures record their
//! holders as tokens (a lock in shared memory, a claimed ring cell, a
//! loaned chunk), and ask a [`Liveness`] whether a holder is still alive:
//! the segment implements it (with the OFD lock of the slot); loom models
//! and unit tests implement it over plain memory.

/// The most attach slots a segment can have; slot indices are `0..MAX_SLOTS`.
pub const MAX_SLOTS: usize = 128;
const SLOT_BITS: u32 = 7;
/// Bits of the generation kept in a token.
pub const GEN_BITS: u32 = 23;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;

/// One attachment of one process to one segment, as 30 bits that are never
/// zero. Bits 30 and 31 of a lock word are free for the lock's own flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(u32);

impl Token {
    /// The largest raw value a token can have; `raw & !Token::MASK` is free.
    pub const MASK: u32 = (1 << (SLOT_BITS + GEN_BITS)) - 1;

    /// No attachment (raw 0, which no real token has): the token of an
    /// observer that holds nothing.
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) const NOBODY: Token = Token(0);

    /// A token for `slot` (< [`MAX_SLOTS`]) at generation `gen`. The
    /// generation is reduced to [`GEN_BITS`] bits, skipping 0.
    ///
    /// ```
    /// use tachyon::segment::Token;
    /// let t = Token::new(5, 9);
    /// assert_eq!((t.slot(), t.gen()), (5, 9));
    /// assert_eq!(Token::from_raw(t.raw()), Some(t));
    /// ```
    pub fn new(slot: usize, gen: u32) -> Token {
        assert!(slot < MAX_SLOTS, "slot index out of range");
        let gen = Self::wrap_gen(gen);
        Token((gen << SLOT_BITS) | slot as u32)
    }

    /// Reduces a generation counter to the non-zero [`GEN_BITS`]-bit value a
    /// token stores.
    pub fn wrap_gen(gen: u32) -> u32 {
        let g = gen & GEN_MASK;
        if g == 0 {
            1
        } else {
            g
        }
    }

    /// Decodes a raw value read from shared memory; `None` if it cannot be
    /// a token (zero, or bits outside [`Token::MASK`]).
    pub fn from_raw(raw: u32) -> Option<Token> {
        if raw == 0 || raw & !Self::MASK != 0 || (raw >> SLOT_BITS) == 0 {
            None
        } else {
            Some(Token(raw))
        }
    }

    /// The raw value stored in lock words.
    pub fn raw(self) -> u32 {
        self.0
    }

    /// The attach slot.
    pub fn slot(self) -> usize {
        (self.0 & ((1 << SLOT_BITS) - 1)) as usize
    }

    /// The slot's generation.
    pub fn gen(self) -> u32 {
        self.0 >> SLOT_BITS
    }
}

/// Tells shared structures (locks, rings, pools) who the caller is and
/// whether another holder is still alive.
///
/// [`Segment`](super::Segment) implements it: each open handle owns an
/// attach slot, and a holder is dead once its slot is released or its
/// process is gone. Checking may cost a system call, so callers ask only on
/// their slow path.
pub trait Liveness {
    /// The caller's token.
    fn token(&self) -> Token;
    /// Whether the attachment named by `token` is gone for good. Must never
    /// say `true` of a live holder; may say `false` of a dead one for a while.
    fn is_dead(&self, token: Token) -> bool;
}
