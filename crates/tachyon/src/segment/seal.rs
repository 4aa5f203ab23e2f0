//! Seals: a 64-bit check over a group of shared words that never change
//! once written (a configuration, a topic's geometry), so that a reader
//! can tell a damaged copy from a good one and heal it from a second copy.
//!
//! Not a defence against a forger (anyone who can write the words can
//! write a matching seal); a defence against bit flips and stray writes,
//! which hit a seal and the words it covers independently. The mixing
//! step is the finalizer of SplitMix64 (Steele, Lea and Flood, "Fast
//! splittable pseudorandom number generators", OOPSLA 2014): every input
//! bit changes about half of the output bits.

/// The seal of `words` under `domain` (a constant naming what is sealed,
/// so that one kind of record never passes for another). Never 0, so that
/// zeroed memory never holds a valid seal.
pub(crate) fn seal(domain: u64, words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h = mix(domain ^ 0x7461_6368_796f_6e21);
    for w in words {
        h = mix(h ^ w);
    }
    h | 1
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::seal;

    #[test]
    fn every_word_and_the_domain_count() {
        let base = seal(1, [1, 2, 3]);
        assert_ne!(base, 0);
        assert_ne!(seal(0, []), 0);
        assert_ne!(base, seal(2, [1, 2, 3]));
        for i in 0..3 {
            for bit in 0..64 {
                let mut w = [1u64, 2, 3];
                w[i] ^= 1 << bit;
                assert_ne!(seal(1, w), base, "word {i} bit {bit}");
            }
        }
    }
}
