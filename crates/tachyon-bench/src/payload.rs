//! What every benchmark item carries: its sequence number, in its first and
//! its last 8 bytes, so that the receiver notices a lost, duplicated,
//! reordered or torn item. A benchmark can never pass by dropping items.

/// Smallest item the stamps fit in.
pub const MIN_ITEM: usize = 16;

/// Builds item `seq` where it will be read (a loan, `send_with`'s
/// buffer): a copy of `template` (of the item's length), then its stamps.
/// What building a message in place costs a producer.
#[inline]
pub fn build(template: &[u8], seq: u64) -> impl Fn(&mut [u8]) + Copy + '_ {
    move |item: &mut [u8]| {
        item.copy_from_slice(template);
        stamp(item, seq);
    }
}

/// Writes `seq` into the first and the last 8 bytes of `item`.
#[inline]
pub fn stamp(item: &mut [u8], seq: u64) {
    let n = item.len();
    debug_assert!(n >= MIN_ITEM);
    item[..8].copy_from_slice(&seq.to_le_bytes());
    item[n - 8..].copy_from_slice(&seq.to_le_bytes());
}

/// Checks that `item` is whole and is item number `expected`.
#[inline]
pub fn check(item: &[u8], expected: u64) -> Result<(), String> {
    let n = item.len();
    if n < MIN_ITEM {
        return Err(format!("item {expected}: {n} bytes, too short for its stamps"));
    }
    let head = u64::from_le_bytes(item[..8].try_into().unwrap_or_default());
    let tail = u64::from_le_bytes(item[n - 8..].try_into().unwrap_or_default());
    if head != expected || tail != expected {
        return Err(format!(
            "expected item {expected}, got one stamped {head} at its start and {tail} at its end \
             (lost, duplicated, reordered or torn)"
        ));
    }
    Ok(())
}

/// Reads every byte of `item` (a 64-bit XOR fold), as a consumer that
/// uses the whole message in place would.
#[inline]
pub fn fold(item: &[u8]) -> u64 {
    let mut words = item.chunks_exact(8);
    let mut acc = 0u64;
    for w in &mut words {
        acc ^= u64::from_le_bytes(w.try_into().unwrap_or_default());
    }
    for &b in words.remainder() {
        acc ^= u64::from(b);
    }
    acc
}

/// Damages `item` in its middle, stamps untouched: what a faulty echo
/// sends back (for the tests).
pub fn damage(item: &mut [u8]) {
    let n = item.len();
    item[n / 2] ^= 0xFF;
}

/// A private buffer of `size` bytes, every page touched, with a pattern
/// that is not all zeros.
pub fn buffer(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i as u8) ^ 0xA5).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_and_catch_mismatches() {
        let mut item = buffer(64);
        stamp(&mut item, 7);
        assert!(check(&item, 7).is_ok());
        assert!(check(&item, 8).is_err());
        item[63] ^= 1; // torn end
        assert!(check(&item, 7).is_err());
        assert!(check(&item[..8], 7).is_err());
    }
}
