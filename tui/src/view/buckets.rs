//! Which latency rows the latency histogram and the heat map draw, from log2 µs slots
//! ([`Log2Hist`]): the data's range, from its low percentile to its maximum.
//!
//! - The bottom row starts at the slot of the 1st percentile and also counts everything
//!   below (labelled `<X` when there is any), so a few fast requests do not push the body off
//!   the pane.
//! - Rows are `k` consecutive slots each, `k` the smallest that fits the body (1st to 99.9th
//!   percentile) in the rows there are, on a fixed grid (a row starts at a multiple of `k`),
//!   so a row's slots, hence its label, depend only on `k`: not on the maximum, nor on the
//!   low percentile moving within a row.
//! - When the rows do not reach the maximum, the last row summarises the outliers: it counts
//!   everything from its first slot up (labelled `≥X`). An outlier thus takes one row at the
//!   slow end rather than folding the body into the first.
//!
//! - When the rows do not fill the pane, the bottom row starts at the low slot and rows are
//!   halved from the bottom up while there are rows to spare.
//!
//! So the labels stay while the body's octave span does; a new maximum at most changes the
//! last row. A body over more than two octaves gets at least
//! `min(rows, 4)` rows.

use iotop_bpf_common::hist::SLOTS;

use crate::model::Log2Hist;

/// The share under the range's low end (counted in the bottom row).
const LOW: f64 = 0.01;
/// The share in the body; above it are outliers (a row of their own when rows are short).
const HIGH: f64 = 0.999;

/// A row: slots `lo..=hi`. The bottom row also counts everything below (`below`), an outlier
/// row everything above (`above`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub lo: usize,
    pub hi: usize,
    pub below: bool,
    pub above: bool,
}

impl Bucket {
    /// What `hist` counts in this row.
    pub fn count(&self, hist: &Log2Hist) -> u64 {
        let lo = if self.below { 0 } else { self.lo };
        let hi = if self.above { SLOTS - 1 } else { self.hi };
        hist.slots[lo..=hi].iter().sum()
    }

    /// Whether `hist` has anything under the row's own slots (its label then says `<`).
    pub fn folds_below(&self, hist: &Log2Hist) -> bool {
        self.below && hist.slots[..self.lo].iter().any(|&n| n > 0)
    }

    /// Whether `hist` has anything over the row's own slots (its label then says `≥`).
    pub fn folds_above(&self, hist: &Log2Hist) -> bool {
        self.above && hist.slots[self.hi + 1..].iter().any(|&n| n > 0)
    }
}

/// The first slot at which the cumulative count reaches `share` of `total`.
fn quantile_slot(hist: &Log2Hist, total: u64, share: f64) -> usize {
    #[expect(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a rank among counts"
    )]
    let rank = ((total as f64) * share).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (slot, &n) in hist.slots.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return slot;
        }
    }
    SLOTS - 1
}

/// The rows for at most `rows` lines, lowest first, over the range of `hists` together
/// (empty when they count nothing).
pub fn plan(hists: &[&Log2Hist], rows: usize) -> Vec<Bucket> {
    let rows = rows.max(1);
    let mut merged = Log2Hist::default();
    for h in hists {
        merged += h;
    }
    let total = merged.total();
    let Some(top) = merged.slots.iter().rposition(|&n| n > 0) else {
        return Vec::new();
    };
    let lo = quantile_slot(&merged, total, LOW);
    let body = quantile_slot(&merged, total, HIGH).max(lo);
    // Rows of `k` slots on a grid of multiples of `k` (octave boundaries that do not move
    // with the low percentile), `k` the smallest that fits the body.
    let mut k = (body - lo + 1).div_ceil(rows).max(1);
    while body / k - lo / k + 1 > rows {
        k += 1;
    }
    let start = lo / k * k;
    let needed = (top - start) / k + 1;
    let row = |j: usize| Bucket {
        lo: start + j * k,
        hi: (start + j * k + k - 1).min(SLOTS - 1),
        below: j == 0,
        above: false,
    };
    let mut out: Vec<Bucket> = (0..needed.min(rows)).map(row).collect();
    if needed > rows {
        // The outliers: everything from the last row up.
        if let Some(last) = out.last_mut() {
            last.above = true;
        }
    } else if out.len() < rows && k > 1 {
        // Rows to spare: the bottom row starts at the low slot (not below it, where there is
        // little), and the rows are halved from the bottom up while they fit.
        out[0].lo = lo.min(out[0].hi);
        let mut i = 0;
        while out.len() < rows && i < out.len() {
            let b = out[i];
            if b.hi > b.lo {
                let mid = b.lo + (b.hi - b.lo).div_ceil(2);
                out[i].hi = mid - 1;
                out.insert(
                    i + 1,
                    Bucket {
                        lo: mid,
                        below: false,
                        ..b
                    },
                );
            } else {
                i += 1;
            }
        }
    }
    out
}

/// A power-of-two microsecond bound in a short unit (truncated, as biolatency's labels).
fn short_us(us: u64) -> (u64, &'static str) {
    match us {
        0..1_000 => (us, "us"),
        1_000..1_000_000 => (us / 1_000, "ms"),
        _ => (us / 1_000_000, "s"),
    }
}

fn short(us: u64) -> String {
    let (n, unit) = short_us(us);
    format!("{n}{unit}")
}

/// The lower bound of a slot in µs (0 for the first).
fn lower_us(slot: usize) -> u64 {
    if slot == 0 {
        0
    } else {
        1 << (slot - 1).min(62)
    }
}

/// The upper bound of a slot in µs.
fn upper_us(slot: usize) -> u64 {
    1 << slot.min(62)
}

/// A histogram row's label for `hist`: `[lo, hi)` as `32-64us`, `512us-2ms`; `<64us` when
/// it also counts what is below; `≥2ms` when it also counts what is above.
pub fn range_label(b: &Bucket, hist: &Log2Hist) -> String {
    if b.folds_above(hist) || b.hi == SLOTS - 1 {
        return format!("≥{}", short(lower_us(b.lo)));
    }
    if b.folds_below(hist) || b.lo == 0 {
        return format!("<{}", short(upper_us(b.hi)));
    }
    let ((lo, lo_unit), (hi, hi_unit)) = (short_us(lower_us(b.lo)), short_us(upper_us(b.hi)));
    if lo_unit == hi_unit {
        format!("{lo}-{hi}{hi_unit}")
    } else {
        format!("{lo}{lo_unit}-{hi}{hi_unit}")
    }
}

/// A heat map row's label: its lower bound (`4ms`); `<16us` when it also counts what is
/// below in any of `hists`, `≥4ms` when it also counts what is above.
pub fn floor_label(b: &Bucket, hists: &[&Log2Hist]) -> String {
    if b.hi == SLOTS - 1 || hists.iter().any(|h| b.folds_above(h)) {
        format!("≥{}", short(lower_us(b.lo)))
    } else if b.lo == 0 || hists.iter().any(|h| b.folds_below(h)) {
        format!("<{}", short(upper_us(b.hi)))
    } else {
        short(lower_us(b.lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(counts: &[(usize, u64)]) -> Log2Hist {
        let mut h = Log2Hist::default();
        for &(slot, n) in counts {
            h.slots[slot] = n;
        }
        h
    }

    fn labels(h: &Log2Hist, rows: usize) -> Vec<String> {
        plan(&[h], rows).iter().map(|b| range_label(b, h)).collect()
    }

    /// 10 µs (slot 4) to 2 ms (slot 11).
    fn ten_us_to_two_ms() -> Log2Hist {
        hist(&[
            (4, 100),
            (5, 300),
            (6, 500),
            (7, 400),
            (8, 300),
            (9, 200),
            (10, 100),
            (11, 50),
        ])
    }

    #[test]
    fn ten_microseconds_to_two_milliseconds_keeps_four_rows_or_more() {
        let h = ten_us_to_two_ms();
        for rows in 4..12 {
            let plan = plan(&[&h], rows);
            let filled = plan.iter().filter(|b| b.count(&h) > 0).count();
            assert!(filled >= 4, "{rows} rows: {plan:?}");
            assert_eq!(plan.iter().map(|b| b.count(&h)).sum::<u64>(), h.total());
        }
        assert_eq!(
            labels(&h, 4),
            ["8-32us", "32-128us", "128-512us", "512us-2ms"]
        );
        assert_eq!(labels(&h, 8)[0], "8-16us");
        assert_eq!(labels(&h, 8)[7], "1-2ms");
    }

    #[test]
    fn one_outlier_takes_the_last_row_not_the_body() {
        // 10 us to 1 ms, and one request of 65 ms.
        let h = hist(&[
            (4, 3000),
            (5, 5000),
            (6, 4000),
            (7, 2500),
            (8, 1500),
            (9, 800),
            (10, 400),
            (17, 1),
        ]);
        let plan = plan(&[&h], 4);
        assert_eq!(plan.len(), 4, "{plan:?}");
        assert!(plan.iter().all(|b| b.count(&h) > 0), "{plan:?}");
        assert_eq!(plan.iter().map(|b| b.count(&h)).sum::<u64>(), h.total());
        assert!(plan[3].above && plan[3].folds_above(&h));
        assert_eq!(plan[3].count(&h), 401);
        assert_eq!(labels(&h, 4), ["8-32us", "32-128us", "128-512us", "≥512us"]);
    }

    #[test]
    fn labels_stay_when_the_maximum_moves_within_the_range_or_an_outlier_comes() {
        let a = ten_us_to_two_ms();
        let mut b = a;
        b.slots[11] = 0;
        b.slots[10] = 130;
        for s in &mut b.slots[4..10] {
            *s += *s / 10;
        }
        assert_eq!(labels(&a, 4), labels(&b, 4));
        assert_eq!(labels(&a, 8)[..7], labels(&b, 8)[..7]);
        // An outlier changes the last row only.
        let mut c = b;
        c.slots[20] = 1;
        let (lb, lc) = (labels(&b, 4), labels(&c, 4));
        assert_eq!(lb[..3], lc[..3]);
        assert_eq!(lc[3], "≥512us");
    }

    #[test]
    fn labels_stay_when_the_low_percentile_moves_within_a_row() {
        // 16 us to 2 ms, then 8 us to 2 ms: the same rows (of two slots), the first counting
        // more.
        let a = hist(&[
            (5, 100),
            (6, 500),
            (7, 400),
            (8, 300),
            (9, 200),
            (10, 100),
            (11, 50),
        ]);
        let mut b = a;
        b.slots[4] = 200;
        assert_eq!(labels(&a, 4), labels(&b, 4));
        assert_eq!(labels(&a, 4)[0], "8-32us");
        assert_eq!(plan(&[&b], 4)[0].count(&b), 300);
    }

    #[test]
    fn spare_rows_split_the_rows_there_are() {
        // 16 us to 512 us (five slots) in four rows: one slot a row, then two.
        let h = hist(&[(5, 200), (6, 200), (7, 200), (9, 250)]);
        assert_eq!(
            labels(&h, 4),
            ["16-32us", "32-64us", "64-128us", "128-512us"]
        );
        assert_eq!(labels(&h, 3), ["8-32us", "32-128us", "128-512us"]);
    }

    #[test]
    fn the_bottom_row_counts_the_few_fast_ones() {
        let h = hist(&[(0, 1), (6, 500), (7, 500)]);
        let plan = plan(&[&h], 6);
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].count(&h), 501);
        assert_eq!(labels(&h, 6), ["<64us", "64-128us"]);
        assert!(super::plan(&[&Log2Hist::default()], 4).is_empty());
    }

    #[test]
    fn heat_map_labels() {
        let mut h = hist(&[(1, 1), (6, 500), (7, 500), (12, 3)]);
        let labels = |h: &Log2Hist, rows| -> Vec<String> {
            plan(&[h], rows)
                .iter()
                .map(|b| floor_label(b, &[h]))
                .collect()
        };
        assert_eq!(labels(&h, 8)[..3], ["<64us", "64us", "128us"]);
        assert_eq!(labels(&h, 8)[6], "2ms");
        assert_eq!(labels(&h, 3), ["<256us", "256us", "2ms"]);
        h.slots[20] = 1;
        assert_eq!(labels(&h, 3), ["<256us", "256us", "≥2ms"]);
    }
}
