//! What the chaos tests (tests/chaos.rs, tests/chaos_primitives.rs) share:
//! a deterministic generator, the environment knobs, and how the driver
//! tells a child what to do.

use super::Args;

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

/// A child whose driver is gone stops on its own.
pub fn orphaned(parent: u32) -> bool {
    std::os::unix::process::parent_id() != parent
}

/// What the driver tells a chaos child (`target`: the region, ring or
/// channel under test; `side`: the bookkeeping segment).
pub struct Task {
    pub target: String,
    pub side: String,
    pub slot: usize,
    pub gen: u64,
    pub inc: u64,
    pub cap: u64,
    pub max_inc: u64,
    pub seed: u64,
    pub parent: u32,
}

impl Task {
    pub fn to_args(&self) -> Args {
        Args::new()
            .with("target", &self.target)
            .with("side", &self.side)
            .with("slot", self.slot)
            .with("gen", self.gen)
            .with("inc", self.inc)
            .with("cap", self.cap)
            .with("max_inc", self.max_inc)
            .with("seed", self.seed)
            .with("parent", self.parent)
    }

    pub fn from_args(args: &Args) -> Task {
        Task {
            target: args.str("target").to_owned(),
            side: args.str("side").to_owned(),
            slot: args.get("slot"),
            gen: args.get("gen"),
            inc: args.get("inc"),
            cap: args.get("cap"),
            max_inc: args.get("max_inc"),
            seed: args.get("seed"),
            parent: args.get("parent"),
        }
    }
}
