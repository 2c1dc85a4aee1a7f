//! Latency histograms.
//!
//! [`LatencyHist`] is a log-linear histogram (HDR style): values below 64 ns are exact, above
//! that every power of two is split into 32 linear sub-buckets, so a reported percentile is
//! within 1/64 (1.6%) of the true value. That is what the percentiles come from; the 2x-wide
//! log2 buckets ([`Log2Hist`]) are only for drawing, as biolatency prints them.

use iotop_bpf_common::hist::{SLOTS, log2_slot};

const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Values at or above 2^42 ns (73 minutes) share the last bucket.
const MAX_MSB: u32 = 41;
#[cfg(test)]
const BUCKETS: usize = bucket_of(u64::MAX) + 1;

const fn bucket_of(value_ns: u64) -> usize {
    if value_ns < 2 * SUB {
        return value_ns as usize;
    }
    let mut msb = 63 - value_ns.leading_zeros();
    let mut value = value_ns;
    if msb > MAX_MSB {
        msb = MAX_MSB;
        value = (1 << (MAX_MSB + 1)) - 1;
    }
    let shift = msb - SUB_BITS;
    ((shift as u64 + 1) * SUB + ((value >> shift) - SUB)) as usize
}

/// The range `[low, high]` of values that fall in `bucket`.
const fn bucket_range(bucket: usize) -> (u64, u64) {
    if bucket < (2 * SUB) as usize {
        return (bucket as u64, bucket as u64);
    }
    let shift = bucket as u64 / SUB - 1;
    let mantissa = bucket as u64 % SUB + SUB;
    (mantissa << shift, ((mantissa + 1) << shift) - 1)
}

/// Log-linear latency histogram in nanoseconds, with exact count, sum and max.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyHist {
    /// Grown on demand up to the highest bucket used.
    buckets: Vec<u64>,
    count: u64,
    sum_ns: u64,
    max_ns: u64,
    /// Exact log2 counts for drawing (fine buckets do not align with microsecond bounds).
    log2: Log2Hist,
}

impl LatencyHist {
    pub fn record(&mut self, value_ns: u64) {
        let bucket = bucket_of(value_ns);
        if self.buckets.len() <= bucket {
            self.buckets.resize(bucket + 1, 0);
        }
        self.buckets[bucket] += 1;
        self.log2.slots[log2_slot(value_ns) as usize] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(value_ns);
        self.max_ns = self.max_ns.max(value_ns);
    }

    pub fn merge(&mut self, other: &Self) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        for (mine, theirs) in self.log2.slots.iter_mut().zip(other.log2.slots) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn clear(&mut self) {
        self.buckets.iter_mut().for_each(|b| *b = 0);
        self.log2 = Log2Hist::default();
        self.count = 0;
        self.sum_ns = 0;
        self.max_ns = 0;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count).unwrap_or(0)
    }

    /// The value at quantile `q` (0..=1): the midpoint of the bucket holding the
    /// `ceil(q * count)`-th smallest value, never above the exact maximum. 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a rank is a small positive integer"
        )]
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        if rank >= self.count {
            return self.max_ns;
        }
        let mut seen = 0;
        for (bucket, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, high) = bucket_range(bucket);
                return (low + (high - low) / 2).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// Counts per log2 microsecond slot, for drawing.
    pub fn log2(&self) -> Log2Hist {
        self.log2
    }
}

/// Counts per log2 microsecond slot ([`iotop_bpf_common::hist::log2_slot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log2Hist {
    pub slots: [u64; SLOTS],
}

impl Default for Log2Hist {
    fn default() -> Self {
        Self { slots: [0; SLOTS] }
    }
}

impl Log2Hist {
    pub fn total(&self) -> u64 {
        self.slots.iter().sum()
    }

    /// Slot-wise `self - earlier`, for turning cumulative kernel counts into an interval.
    pub fn since(&self, earlier: &Self) -> Self {
        let mut out = *self;
        for (slot, before) in out.slots.iter_mut().zip(earlier.slots) {
            *slot = slot.saturating_sub(before);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        let mut expected_low = 0;
        for bucket in 0..BUCKETS {
            let (low, high) = bucket_range(bucket);
            assert_eq!(low, expected_low, "bucket {bucket}");
            assert!(high >= low);
            assert_eq!(bucket_of(low), bucket);
            assert_eq!(bucket_of(high), bucket);
            expected_low = high + 1;
        }
    }

    #[test]
    fn quantiles_of_a_uniform_distribution_are_within_two_percent() {
        let mut hist = LatencyHist::default();
        // 1..=100_000 us, each once.
        for us in 1..=100_000u64 {
            hist.record(us * 1_000);
        }
        for (q, exact) in [
            (0.5, 50_000_000.0),
            (0.99, 99_000_000.0),
            (0.999, 99_900_000.0),
        ] {
            #[expect(clippy::cast_precision_loss, reason = "test values are small")]
            let got = hist.quantile_ns(q) as f64;
            assert!((got - exact).abs() / exact < 0.02, "q{q}: {got} vs {exact}");
        }
        assert_eq!(hist.max_ns(), 100_000_000);
        assert_eq!(hist.count(), 100_000);
        assert_eq!(hist.log2().total(), 100_000);
    }

    #[test]
    fn the_top_rank_is_the_exact_maximum() {
        let mut hist = LatencyHist::default();
        hist.record(1_234_567);
        assert_eq!(hist.quantile_ns(0.0), 1_234_567);
        assert_eq!(hist.quantile_ns(0.5), 1_234_567);
        assert_eq!(hist.quantile_ns(1.0), 1_234_567);
    }

    #[test]
    fn empty_and_huge_values_do_not_panic() {
        let mut hist = LatencyHist::default();
        assert_eq!(hist.quantile_ns(0.99), 0);
        hist.record(u64::MAX);
        hist.record(0);
        assert_eq!(hist.count(), 2);
        assert_eq!(hist.quantile_ns(1.0), u64::MAX);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyHist::default();
        let mut b = LatencyHist::default();
        a.record(10);
        b.record(1_000_000);
        b.record(2_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.max_ns(), 2_000_000);
        assert_eq!(a.sum_ns(), 3_000_010);
    }
}
