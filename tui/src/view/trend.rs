//! Drawing time with characters: sparklines (`▁▂▃▅▇`) and heat map shades (` ░▒▓█`), both
//! readable without colour. Shared by the disks pane and the heat map pane.

/// Sparkline levels; a blank is "nothing", so a quiet moment stays visible as a gap.
const SPARK: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Heat map shades, from none to the busiest cell.
pub const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];

/// `values` (oldest first) as a sparkline of exactly `width` characters, right-aligned (the
/// newest at the right end). When there are more values than characters, each character
/// shows the largest of the values it covers, so a short peak is never averaged away.
pub fn sparkline(values: &[f64], width: usize) -> String {
    if width == 0 {
        return String::new();
    }
    let per = values.len().div_ceil(width).max(1);
    // Buckets end at the newest value, so the right end is always the latest interval.
    let buckets: Vec<f64> = values
        .rchunks(per)
        .map(|chunk| chunk.iter().copied().fold(0.0, f64::max))
        .take(width)
        .collect();
    let max = buckets.iter().copied().fold(0.0, f64::max);
    let mut out: String = " ".repeat(width - buckets.len());
    for &v in buckets.iter().rev() {
        let level = if max <= 0.0 || v <= 0.0 {
            0
        } else {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a level from 1 to 8"
            )]
            let level = (v / max * 8.0).ceil() as usize;
            level.clamp(1, 8)
        };
        out.push(SPARK[level]);
    }
    out
}

/// Shading of heat map cells on a log scale of the count, relative to the busiest cell in
/// view (`max`): any non-zero count shows at least `░`, as in Brendan Gregg's latency heat
/// maps, where a lone outlier must stay visible next to a dense band.
#[derive(Clone, Copy, Debug)]
pub struct Shading {
    max: u64,
}

impl Shading {
    pub fn new(max: u64) -> Self {
        Self { max }
    }

    /// 0 (empty) to 4 (the busiest).
    pub fn level(self, count: u64) -> usize {
        if count == 0 {
            return 0;
        }
        if self.max <= 1 || count >= self.max {
            return 4;
        }
        // The epsilon keeps exact powers (10 of 1000) from falling a level on rounding.
        #[expect(clippy::cast_precision_loss, reason = "a shade")]
        let frac = (count as f64).ln() / (self.max as f64).ln();
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a level from 1 to 4"
        )]
        let level = 1 + (frac * 3.0 + 1e-9).floor() as usize;
        level.clamp(1, 4)
    }

    /// The smallest count of each level 1..=4 (for the legend); `None` for a level no count
    /// reaches.
    pub fn thresholds(self) -> [Option<u64>; 4] {
        let mut out = [None; 4];
        for (i, slot) in out.iter_mut().enumerate() {
            let level = i + 1;
            // The level is monotonic in the count: binary search its first count.
            let (mut lo, mut hi) = (1u64, self.max.max(1));
            if self.level(hi) < level {
                continue;
            }
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.level(mid) >= level {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            if self.level(lo) == level {
                *slot = Some(lo);
            }
        }
        out
    }
}

pub use crate::units::count;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_keep_peaks_and_end_with_the_newest() {
        assert_eq!(sparkline(&[], 4), "    ");
        assert_eq!(sparkline(&[0.0, 1.0, 2.0, 4.0, 8.0], 5), " ▁▂▄█");
        // Ten values in five characters: each shows the larger of its pair.
        let spark = sparkline(&[8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], 5);
        assert_eq!(spark.chars().count(), 5);
        assert_eq!(spark, "█   ▁");
        assert_eq!(sparkline(&[0.0; 3], 3), "   ");
    }

    #[test]
    fn shades_are_logarithmic_and_an_outlier_stays_visible() {
        let shading = Shading::new(1_000);
        assert_eq!(shading.level(0), 0);
        assert_eq!(shading.level(1), 1, "a single outlier is drawn");
        assert_eq!(shading.level(10), 2);
        assert_eq!(shading.level(100), 3);
        assert_eq!(shading.level(999), 3);
        assert_eq!(shading.level(1_000), 4);
        assert_eq!(
            shading.thresholds(),
            [Some(1), Some(10), Some(100), Some(1_000)]
        );
        assert_eq!(Shading::new(1).level(1), 4);
        assert_eq!(Shading::new(2).thresholds(), [Some(1), None, None, Some(2)]);
    }
}
