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
mod tests;
