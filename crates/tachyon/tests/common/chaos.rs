//! What the chaos tests (tests/chaos.rs, tests/chaos_primitives.rs) share:
//! a deterministic generator, the environment knobs, and how the driver
//! tells a child what to do.

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

/// What the driver tells a child: `target,side,slot,gen,inc,cap,max_inc,seed,parent`
/// (`target`: the region, ring or channel under test).
pub struct Args {
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

impl Args {
    pub fn encode(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{}",
            self.target,
            self.side,
            self.slot,
            self.gen,
            self.inc,
            self.cap,
            self.max_inc,
            self.seed,
            self.parent
        )
    }
    pub fn decode(s: &str) -> Args {
        let p: Vec<&str> = s.split(',').collect();
        let n = |i: usize| -> u64 { p[i].parse().expect("numeric argument") };
        Args {
            target: p[0].into(),
            side: p[1].into(),
            slot: n(2) as usize,
            gen: n(3),
            inc: n(4),
            cap: n(5),
            max_inc: n(6),
            seed: n(7),
            parent: n(8) as u32,
        }
    }
}
