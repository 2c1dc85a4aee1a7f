//! Latency histograms.
//!
//! [`Histogram`] is log-linear (HDR style): values below 64 are exact, above that every power
//! of two is split into 32 linear sub-buckets, so a reported percentile is within 1/64 (1.6%)
//! of the true value. That is what the percentiles come from; the 2x-wide log2 buckets
//! ([`Log2Hist`]) are only for drawing, as biolatency prints them.

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

/// Log-linear histogram with exact count, sum and max. Unit-agnostic (latencies in ns,
/// sizes in bytes). Only the buckets seen are stored: their counts one by one while there are
/// few (a short-lived process's handful of requests spans ten octaves of queue time, 300
/// buckets, for 3 values), else every bucket between the smallest and the largest value
/// (a process whose latencies span 10 us to 1 ms keeps ~200 buckets, not 1,300).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    buckets: Buckets,
    count: u64,
    sum: u64,
    max: u64,
}

/// Distinct buckets kept one by one before a histogram stores its span.
const FEW: usize = 8;

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
enum Buckets {
    /// (bucket, count), ascending, at most [`FEW`].
    Few(Vec<(usize, u64)>),
    /// Counts of the buckets from `first` on.
    Span { first: usize, counts: Vec<u64> },
}

impl Default for Buckets {
    fn default() -> Self {
        Self::Few(Vec::new())
    }
}

impl Buckets {
    fn add(&mut self, bucket: usize, n: u64) {
        match self {
            Self::Few(pairs) => match pairs.binary_search_by_key(&bucket, |&(b, _)| b) {
                Ok(at) => pairs[at].1 += n,
                Err(at) if pairs.len() < FEW => pairs.insert(at, (bucket, n)),
                Err(_) => {
                    let mut span = Self::Span {
                        first: bucket,
                        counts: Vec::new(),
                    };
                    for &(b, count) in pairs.iter() {
                        span.add(b, count);
                    }
                    span.add(bucket, n);
                    *self = span;
                }
            },
            Self::Span { first, counts } => {
                if counts.is_empty() {
                    *first = bucket;
                } else if bucket < *first {
                    let grow = *first - bucket;
                    counts.splice(0..0, std::iter::repeat_n(0, grow));
                    *first = bucket;
                }
                let at = bucket - *first;
                if counts.len() <= at {
                    counts.resize(at + 1, 0);
                }
                counts[at] += n;
            }
        }
    }

    /// (bucket, count) of the buckets holding something, ascending.
    fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (few, span) = match self {
            Self::Few(pairs) => (Some(pairs.iter().copied()), None),
            Self::Span { first, counts } => (
                None,
                Some(
                    counts
                        .iter()
                        .enumerate()
                        .filter(|&(_, &n)| n != 0)
                        .map(move |(i, &n)| (first + i, n)),
                ),
            ),
        };
        few.into_iter().flatten().chain(span.into_iter().flatten())
    }

    fn clear(&mut self) {
        match self {
            Self::Few(pairs) => pairs.clear(),
            // Back to few: a period's span is not kept for the next one.
            Self::Span { .. } => *self = Self::default(),
        }
    }

    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        match self {
            Self::Few(pairs) => pairs.capacity() * size_of::<(usize, u64)>(),
            Self::Span { counts, .. } => counts.capacity() * size_of::<u64>(),
        }
    }
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    /// `n` values of `value` (what a slot of a kernel histogram stands for).
    pub fn record_n(&mut self, value: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.buckets.add(bucket_of(value), n);
        self.count += n;
        self.sum = self.sum.saturating_add(value.saturating_mul(n));
        self.max = self.max.max(value);
    }

    pub fn merge(&mut self, other: &Self) {
        for (bucket, n) in other.buckets.iter() {
            self.buckets.add(bucket, n);
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    /// Empties it.
    pub fn clear(&mut self) {
        self.buckets.clear();
        self.count = 0;
        self.sum = 0;
        self.max = 0;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> u64 {
        self.sum
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn mean(&self) -> u64 {
        self.sum.checked_div(self.count).unwrap_or(0)
    }

    /// The value at quantile `q` (0..=1): the midpoint of the bucket holding the
    /// `ceil(q * count)`-th smallest value, never above the exact maximum. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
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
            return self.max;
        }
        let mut seen = 0;
        for (bucket, n) in self.buckets.iter() {
            seen += n;
            if seen >= rank {
                let (low, high) = bucket_range(bucket);
                return (low + (high - low) / 2).min(self.max);
            }
        }
        self.max
    }

    /// The mean of the values at least `min`, leaving out the largest `1 - keep` share of
    /// them (by bucket midpoints): a typical value that a few huge ones cannot drag up.
    /// `None` when no value is at least `min`.
    #[expect(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "counts and a rank of a histogram"
    )]
    pub fn trimmed_mean_from(&self, min: u64, keep: f64) -> Option<u64> {
        let from = bucket_of(min);
        let counted = || self.buckets.iter().filter(move |&(b, _)| b >= from);
        let total: u64 = counted().map(|(_, n)| n).sum();
        if total == 0 {
            return None;
        }
        let mut left = ((total as f64 * keep.clamp(0.0, 1.0)).ceil() as u64).max(1);
        let (mut sum, mut n) = (0u128, 0u64);
        for (bucket, count) in counted() {
            let take = count.min(left);
            let (low, high) = bucket_range(bucket);
            sum += u128::from(low + (high - low) / 2) * u128::from(take);
            n += take;
            left -= take;
            if left == 0 {
                break;
            }
        }
        u64::try_from(sum / u128::from(n.max(1))).ok()
    }

    /// Counts per log2 microsecond slot, for drawing a latency histogram (each fine bucket
    /// goes to the slot of its midpoint: a bucket is at most 1/32 of its value wide).
    pub fn log2(&self) -> Log2Hist {
        let mut out = Log2Hist::default();
        for (bucket, n) in self.buckets.iter() {
            let (low, high) = bucket_range(bucket);
            out.slots[log2_slot(low + (high - low) / 2) as usize] += n;
        }
        out
    }

    /// Bytes of heap it holds (for the memory bounds' tests).
    #[cfg(test)]
    pub fn heap_bytes(&self) -> usize {
        self.buckets.heap_bytes()
    }
}

/// Counts per log2 microsecond slot ([`iotop_bpf_common::hist::log2_slot`]).
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
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

    /// Percentiles read from the slots (each the upper bound of the slot the quantile falls
    /// in, at most `max_ns`): coarser than a [`Histogram`]'s, for figures summed over
    /// processes, whose fine histograms are not kept. No mean: the slots do not give one.
    pub fn latency(&self, max_ns: u64) -> Latency {
        let count = self.total();
        let quantile = |q: f64| -> u64 {
            #[expect(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a rank among counts"
            )]
            let rank = ((count as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (slot, &n) in self.slots.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    let upper_ns = iotop_bpf_common::hist::slot_upper_us(slot as u32) * 1000;
                    return upper_ns.min(max_ns.max(1));
                }
            }
            max_ns
        };
        Latency {
            count,
            mean_ns: 0,
            p50_ns: quantile(0.50),
            p99_ns: quantile(0.99),
            p999_ns: quantile(0.999),
            max_ns,
        }
    }
}

/// Slot-wise sum: the histogram of two populations together.
impl std::ops::AddAssign<&Log2Hist> for Log2Hist {
    fn add_assign(&mut self, other: &Self) {
        for (slot, n) in self.slots.iter_mut().zip(other.slots) {
            *slot += n;
        }
    }
}

/// Request sizes in log2 byte buckets, for the exporter's size histogram: slot `i` counts
/// requests of at most `512 << i` bytes (and more than `256 << i`); the last slot takes every
/// larger request. A fixed array: bounded whatever the workload.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeHist {
    pub slots: [u64; SIZE_SLOTS],
    /// Exact sum of the sizes counted.
    pub sum_bytes: u64,
}

/// 512 B, 1 KiB, ... 16 MiB, then everything larger.
pub const SIZE_SLOTS: usize = 17;

impl SizeHist {
    /// Inclusive upper bound of a slot in bytes (`None`: the last, unbounded slot).
    pub const fn slot_le_bytes(slot: usize) -> Option<u64> {
        if slot + 1 < SIZE_SLOTS {
            Some(512 << slot)
        } else {
            None
        }
    }

    pub fn record(&mut self, bytes: u64) {
        self.record_n(bytes, 1);
    }

    /// `n` requests of `bytes`.
    pub fn record_n(&mut self, bytes: u64, n: u64) {
        // The smallest slot whose bound is >= bytes: ceil(log2(bytes)) - 9, clamped.
        let bits = u64::BITS - bytes.saturating_sub(1).leading_zeros();
        let slot = (bits.saturating_sub(9) as usize).min(SIZE_SLOTS - 1);
        self.slots[slot] += n;
        self.sum_bytes = self.sum_bytes.saturating_add(bytes.saturating_mul(n));
    }

    pub fn count(&self) -> u64 {
        self.slots.iter().sum()
    }

    pub fn merge(&mut self, other: &Self) {
        for (slot, n) in self.slots.iter_mut().zip(other.slots) {
            *slot += n;
        }
        self.sum_bytes = self.sum_bytes.saturating_add(other.sum_bytes);
    }
}

/// Percentiles of a latency distribution, in nanoseconds.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl Latency {
    pub fn of(hist: &Histogram) -> Self {
        Self {
            count: hist.count(),
            mean_ns: hist.mean(),
            p50_ns: hist.quantile(0.50),
            p99_ns: hist.quantile(0.99),
            p999_ns: hist.quantile(0.999),
            max_ns: hist.max(),
        }
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
        let mut hist = Histogram::default();
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
            let got = hist.quantile(q) as f64;
            assert!((got - exact).abs() / exact < 0.02, "q{q}: {got} vs {exact}");
        }
        assert_eq!(hist.max(), 100_000_000);
        assert_eq!(hist.count(), 100_000);
        assert_eq!(hist.log2().total(), 100_000);
    }

    #[test]
    fn the_top_rank_is_the_exact_maximum() {
        let mut hist = Histogram::default();
        hist.record(1_234_567);
        assert_eq!(hist.quantile(0.0), 1_234_567);
        assert_eq!(hist.quantile(0.5), 1_234_567);
        assert_eq!(hist.quantile(1.0), 1_234_567);
    }

    #[test]
    fn empty_and_huge_values_do_not_panic() {
        let mut hist = Histogram::default();
        assert_eq!(hist.quantile(0.99), 0);
        hist.record(u64::MAX);
        hist.record(0);
        assert_eq!(hist.count(), 2);
        assert_eq!(hist.quantile(1.0), u64::MAX);
    }

    #[test]
    fn only_the_used_range_is_stored() {
        let mut hist = Histogram::default();
        hist.record(100_000);
        hist.record(1_000_000);
        assert!(hist.heap_bytes() <= 120 * 8, "{}", hist.heap_bytes());
        hist.record(10_000);
        hist.record(5_000_000);
        assert_eq!(hist.count(), 4);
        assert_eq!(hist.quantile(0.0), bucket_mid(10_000));
        assert_eq!(hist.quantile(1.0), 5_000_000);
        let mut other = Histogram::default();
        other.record(50);
        hist.merge(&other);
        assert_eq!(hist.quantile(0.0), 50, "grown downwards by a merge");
        hist.clear();
        assert_eq!((hist.count(), hist.quantile(0.5)), (0, 0));
        hist.record(7);
        assert_eq!(hist.quantile(0.5), 7);
    }

    #[test]
    fn a_handful_of_values_ten_octaves_apart_take_a_handful_of_slots() {
        // A short-lived process: a queue time of 300 ns, one of 400 us (3,000 buckets apart).
        let mut few = Histogram::default();
        few.record(300);
        few.record(400_000);
        assert!(few.heap_bytes() <= FEW * 16, "{}", few.heap_bytes());
        // Past FEW distinct buckets it stores its span, and answers the same.
        let mut spread = Histogram::default();
        let values: Vec<u64> = (0..40).map(|i| 1_000 + i * 7_919).collect();
        for &v in &values {
            spread.record(v);
            few.record(v);
        }
        assert!(matches!(spread.buckets, Buckets::Span { .. }));
        let mut by_one = Histogram::default();
        for &v in &values {
            by_one.record(v);
        }
        for q in [0.0, 0.25, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(spread.quantile(q), by_one.quantile(q), "q{q}");
        }
        assert_eq!(few.count(), 42);
        assert_eq!(few.quantile(0.0), bucket_mid(300));
        assert_eq!(few.quantile(1.0), 400_000);
        assert_eq!(few.log2().total(), 42);
    }

    fn bucket_mid(value: u64) -> u64 {
        let (low, high) = bucket_range(bucket_of(value));
        low + (high - low) / 2
    }

    #[test]
    fn a_trimmed_mean_ignores_the_few_huge_values() {
        let mut h = Histogram::default();
        for _ in 0..199 {
            h.record(4096);
        }
        h.record(2 << 20);
        for _ in 0..50 {
            h.record(12);
        }
        let typical = h.trimmed_mean_from(4096, 0.9).unwrap();
        assert!((4000..4200).contains(&typical), "{typical}");
        assert_eq!(h.trimmed_mean_from(8 << 20, 0.9), None);
        assert!(
            h.trimmed_mean_from(0, 1.0).unwrap() > 10_000,
            "the plain mean is dragged up"
        );
    }

    #[test]
    fn request_sizes_fall_in_the_bucket_whose_bound_they_do_not_exceed() {
        let mut sizes = SizeHist::default();
        for bytes in [
            0,
            1,
            512,
            513,
            4096,
            4097,
            16 << 20,
            (16 << 20) + 1,
            u64::MAX,
        ] {
            sizes.record(bytes);
        }
        let slot_of = |bytes: u64| {
            let mut one = SizeHist::default();
            one.record(bytes);
            one.slots.iter().position(|&n| n == 1).unwrap()
        };
        assert_eq!(slot_of(0), 0);
        assert_eq!(slot_of(512), 0, "512 B is <= le 512");
        assert_eq!(slot_of(513), 1);
        assert_eq!(SizeHist::slot_le_bytes(3), Some(4096));
        assert_eq!(slot_of(4096), 3);
        assert_eq!(slot_of(4097), 4);
        assert_eq!(SizeHist::slot_le_bytes(15), Some(16 << 20));
        assert_eq!(slot_of(16 << 20), 15);
        assert_eq!(slot_of((16 << 20) + 1), SIZE_SLOTS - 1);
        assert_eq!(SizeHist::slot_le_bytes(SIZE_SLOTS - 1), None);
        assert_eq!(slot_of(u64::MAX), SIZE_SLOTS - 1);
        assert_eq!(sizes.count(), 9);
        assert_eq!(sizes.sum_bytes, u64::MAX, "saturates");
        let mut merged = SizeHist::default();
        merged.record(4096);
        merged.merge(&merged.clone());
        assert_eq!((merged.count(), merged.sum_bytes), (2, 8192));
    }

    #[test]
    fn log2_histograms_add_and_give_slot_percentiles() {
        let mut a = Log2Hist::default();
        a.slots[4] = 90; // 8-16 us
        let mut b = Log2Hist::default();
        b.slots[4] = 9;
        b.slots[10] = 1; // 512 us-1 ms
        a += &b;
        assert_eq!(a.total(), 100);
        let lat = a.latency(900_000);
        assert_eq!(lat.count, 100);
        assert_eq!(lat.p50_ns, 16_000, "the upper bound of 8-16 us");
        assert_eq!(lat.p99_ns, 16_000, "99 of 100 are in the first slot");
        assert_eq!(
            lat.p999_ns, 900_000,
            "the slowest slot, at most the maximum"
        );
        assert_eq!(Log2Hist::default().latency(0).p99_ns, 0);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        a.record(10);
        b.record(1_000_000);
        b.record(2_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.max(), 2_000_000);
        assert_eq!(a.sum(), 3_000_010);
    }
}
