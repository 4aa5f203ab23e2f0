//! What the chaos tests (tests/chaos.rs, tests/chaos_primitives.rs) share:
//! a deterministic generator and the environment knobs; their processes
//! and bookkeeping are in `fleet.rs`.

use std::time::{Duration, Instant, SystemTime};

/// splitmix64: a tiny deterministic generator (no dependency).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A numeric knob from the environment.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The driver's seed: `TACHYON_CHAOS_SEED`, or one from the clock, the
/// process id and `salt` (which tells the tests of one run apart).
pub fn seed_for(salt: u64) -> u64 {
    env_u64("TACHYON_CHAOS_SEED", {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        mix(now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 40) ^ salt)
    })
}

/// A child whose driver is gone stops on its own.
pub fn orphaned(parent: u32) -> bool {
    std::os::unix::process::parent_id() != parent
}

/// Waits until `empty` holds and the counter `delivered` has not moved for
/// 300 ms; whether that happened within `limit`.
pub fn drained(limit: Duration, delivered: impl Fn() -> u64, empty: impl Fn() -> bool) -> bool {
    let mut last = delivered();
    let mut quiet_since = Instant::now();
    super::wait_for(limit, || {
        let now = delivered();
        if now != last {
            last = now;
            quiet_since = Instant::now();
        }
        empty() && quiet_since.elapsed() > Duration::from_millis(300)
    })
}

/// Which of the 64 sequence numbers from `base` were reserved (are below
/// `next`), as a mask.
pub fn reserved(next: u64, base: u64) -> u64 {
    match next.saturating_sub(base) {
        0 => 0,
        n if n >= 64 => u64::MAX,
        n => (1 << n) - 1,
    }
}

/// Fails the test with every problem it found, if any, and the state at
/// its end.
pub fn fail_on(problems: &[String], label: &str, seed: u64, state: &str) {
    if !problems.is_empty() {
        panic!(
            "{label} (seed {seed}) found problems:\n  {}\nstate at the end:\n{state}",
            problems.join("\n  ")
        );
    }
}
