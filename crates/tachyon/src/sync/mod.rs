//! Process-shared synchronisation that lives inside segments.
//!
//! Every type here is `#[repr(C)]`, made only of atomics, valid when all
//! its bytes are zero, and placed in shared memory (see
//! [`Segment::get`](crate::Segment::get)). Waiting uses shared futexes; the
//! fast paths make no system call when nobody sleeps.
//!
//! * [`Event`]: auto-reset or manual-reset event;
//! * [`Mutex`]: robust mutex; a holder's death is reported to the next locker;
//! * [`RwLock`]: counted, writer-preferring, robust reader-writer lock;
//! * [`WaitPolicy`] and [`WaitCell`]: how later layers wait for a condition.

mod token;

pub use token::{Liveness, Token, GEN_BITS, MAX_SLOTS};
