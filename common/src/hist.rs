//! log2 latency histograms shared by the kernel maps and the user side.

/// Number of log2 slots. Slot `i` counts latencies in microseconds in `[2^(i-1), 2^i)`, slot 0
/// counts latencies below 1 us; the last slot also takes everything above (2^30 us is ~18 min).
pub const SLOTS: usize = 32;

/// Index of the highest set bit of `x` plus one (0 for 0).
///
/// Branch-free on purpose: BPF has no conditional move, so every comparison is a branch the
/// verifier must walk, and three binary searches per completion blow its 1M-instruction
/// budget. Smearing the top bit right and counting bits (SWAR popcount) needs no branches
/// and no bit-counting intrinsics (which have had lowering gaps on the BPF target).
#[inline(always)]
#[must_use]
pub const fn bit_length(x: u64) -> u32 {
    let mut v = x;
    v |= v >> 1;
    v |= v >> 2;
    v |= v >> 4;
    v |= v >> 8;
    v |= v >> 16;
    v |= v >> 32;
    v -= (v >> 1) & 0x5555_5555_5555_5555;
    v = (v & 0x3333_3333_3333_3333) + ((v >> 2) & 0x3333_3333_3333_3333);
    v = (v + (v >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    (v.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u32
}

/// Slot of a latency given in nanoseconds (microsecond log2 buckets, as biolatency prints).
/// Branch-free, like [`bit_length`].
#[inline(always)]
#[must_use]
pub const fn log2_slot(lat_ns: u64) -> u32 {
    let bits = bit_length(lat_ns / 1000);
    // min(bits, SLOTS - 1) without a branch: the mask is all ones when bits < SLOTS - 1.
    let last = SLOTS as u32 - 1;
    let below = ((bits.wrapping_sub(last)) >> 31).wrapping_neg();
    (bits & below) | (last & !below)
}

/// `x` in 16 bits, within 0.1%: exact below 2,048 ns, else an 11-bit mantissa and a 5-bit
/// shift (up to ~73 minutes; saturates beyond). Room for a time in a cache-line-sized slot
/// of the in-flight table, where no u64 fits. Branch-free like [`bit_length`].
#[inline(always)]
#[must_use]
pub const fn compress_ns(x: u64) -> u16 {
    let bits = bit_length(x);
    // shift = clamp(bits - 11, 0, 31), branch-free.
    let over = bits.saturating_sub(11);
    let fits = ((over.wrapping_sub(31)) >> 31).wrapping_neg(); // all ones when over < 31
    let shift = (over & fits) | (31 & !fits);
    let mantissa = x >> shift;
    // Beyond the range the mantissa has more than 11 bits: saturate it.
    let small = ((mantissa.wrapping_sub(0x800)) >> 63).wrapping_neg(); // all ones when < 0x800
    let mantissa = (mantissa & small) | (0x7ff & !small);
    ((shift << 11) as u16) | mantissa as u16
}

/// The time [`compress_ns`] kept.
#[must_use]
pub const fn expand_ns(code: u16) -> u64 {
    ((code & 0x7ff) as u64) << (code >> 11)
}

/// Exclusive upper bound, in microseconds, of a slot (`le` in the JSON histogram).
#[must_use]
pub const fn slot_upper_us(slot: u32) -> u64 {
    1u64 << slot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_microsecond_powers_of_two() {
        assert_eq!(log2_slot(0), 0);
        assert_eq!(log2_slot(999), 0);
        assert_eq!(log2_slot(1_000), 1);
        assert_eq!(log2_slot(1_999), 1);
        assert_eq!(log2_slot(2_000), 2);
        assert_eq!(log2_slot(3_999), 2);
        assert_eq!(log2_slot(4_000), 3);
        assert_eq!(log2_slot(1_000_000), 10); // 1000 us is in [512, 1024)
        assert_eq!(log2_slot(u64::MAX), SLOTS as u32 - 1);
    }

    #[test]
    fn compressed_times_are_exact_when_small_and_within_a_tenth_of_a_percent_after() {
        for x in 0..2048 {
            assert_eq!(expand_ns(compress_ns(x)), x);
        }
        let mut x = 2048u64;
        while x < 1 << 42 {
            for y in [x, x + 1, x * 3 / 2, x * 2 - 1] {
                let back = expand_ns(compress_ns(y));
                assert!(back <= y && y - back <= y / 1024, "{y} -> {back}");
            }
            x *= 2;
        }
        assert_eq!(expand_ns(compress_ns(u64::MAX)), 0x7ff << 31, "saturates");
    }

    #[test]
    fn every_latency_lies_below_its_slot_bound() {
        let mut ns = 1u64;
        while ns < 1 << 50 {
            let slot = log2_slot(ns);
            let us = ns / 1000;
            if slot < SLOTS as u32 - 1 {
                assert!(us < slot_upper_us(slot), "{ns} ns in slot {slot}");
                if slot > 0 {
                    assert!(us >= slot_upper_us(slot - 1), "{ns} ns in slot {slot}");
                }
            }
            ns = ns * 3 / 2 + 1;
        }
    }
}
