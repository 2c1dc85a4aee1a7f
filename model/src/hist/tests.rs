//! The histograms on known distributions: buckets, quantiles, the stored range, sizes.

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
