//! The wait before the request: direct I/O call latency and dirty-throttling pauses, from the
//! kernel's cumulative per-process aggregates in each sample.
//!
//! A call's latency runs from `iomap_dio_rw_begin` to `iomap_dio_complete`; a request's from
//! its creation to its completion. blk-throttle (cgroup v1 `blkio.throttle.*`, v2 `io.max`),
//! iocost and a full request queue hold the bio *before* the request exists, so the request's
//! latency never shows that wait. The **pre-queue time** of a process's calls on a disk is the
//! call time beyond the reference request latency (the p99 of its own requests in the
//! interval, or of the disk's when it created fewer than [`MIN_OWN_REQUESTS`]):
//! `sum over calls of max(0, call latency - reference)`. Measured against the slow end of the
//! requests, it is a lower bound of the time calls spent outside any request, and a healthy
//! workload (calls as slow as their requests, even when split into many) scores near zero.

use std::collections::HashMap;

use iotop_bpf_common::{
    hist::{SLOTS, log2_slot},
    throttle::{CALL_SLOTS, call_slot_bounds_us},
};

use super::{Dev, DioCallTotals, DirtyPauseTotals, KernelSample, Log2Hist};

/// A process with fewer requests of its own in the interval is compared with its disk's.
pub const MIN_OWN_REQUESTS: u64 = 20;

/// Quarter-octave histogram of call latencies (the kernel's slots, `u64` here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallHist {
    pub calls: u64,
    pub sum_ns: u64,
    pub slots: [u64; CALL_SLOTS],
}

impl Default for CallHist {
    fn default() -> Self {
        Self {
            calls: 0,
            sum_ns: 0,
            slots: [0; CALL_SLOTS],
        }
    }
}

/// `[low, high)` of a slot in ns; the last slot is open above and counted at its low bound.
fn bounds_ns(slot: usize) -> (u64, u64) {
    let (lo, hi) = call_slot_bounds_us(slot);
    if slot == CALL_SLOTS - 1 {
        (lo * 1000, lo * 1000)
    } else {
        (lo * 1000, hi * 1000)
    }
}

impl CallHist {
    /// Records one call (tests and synthetic streams; live figures come from the kernel).
    pub fn record(&mut self, latency_ns: u64) {
        let slot = iotop_bpf_common::throttle::call_slot(latency_ns) as usize;
        self.slots[slot] += 1;
        self.calls += 1;
        self.sum_ns = self.sum_ns.saturating_add(latency_ns);
    }

    pub fn merge(&mut self, other: &Self) {
        for (a, b) in self.slots.iter_mut().zip(&other.slots) {
            *a += b;
        }
        self.calls += other.calls;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.calls).unwrap_or(0)
    }

    /// The latency at quantile `q`, interpolated linearly inside its slot (a slot is at most a
    /// quarter of its low bound wide). 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.slots.iter().sum();
        if total == 0 {
            return 0;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a rank within the count"
        )]
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut below = 0;
        for (slot, &n) in self.slots.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if below + n >= rank {
                let (lo, hi) = bounds_ns(slot);
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss,
                    reason = "an interpolated latency"
                )]
                let within = (((rank - below) as f64 - 0.5) / n as f64 * (hi - lo) as f64) as u64;
                return lo + within;
            }
            below += n;
        }
        0
    }

    /// `sum over calls of max(0, latency - reference_ns)`, calls spread evenly in their slot.
    pub fn excess_over(&self, reference_ns: u64) -> u64 {
        let mut excess: u128 = 0;
        let reference = u128::from(reference_ns);
        for (slot, &n) in self.slots.iter().enumerate() {
            let (lo, hi) = bounds_ns(slot);
            let (lo, hi, n) = (u128::from(lo), u128::from(hi), u128::from(n));
            if n == 0 || hi <= reference && lo < hi {
                continue;
            }
            excess += if lo == hi {
                // The open last slot, counted at its low bound.
                n * lo.saturating_sub(reference)
            } else if reference <= lo {
                // The whole slot is above: its calls average its midpoint.
                n * ((lo + hi) / 2 - reference)
            } else {
                // Uniform over [lo, hi): the part above the reference averages (hi - ref) / 2.
                n * (hi - reference) * (hi - reference) / (2 * (hi - lo))
            };
        }
        u64::try_from(excess).unwrap_or(u64::MAX)
    }

    /// The same calls in the 2x-wide log2 slots the views draw.
    pub fn log2(&self) -> Log2Hist {
        let mut out = Log2Hist::default();
        for (slot, &n) in self.slots.iter().enumerate() {
            if n > 0 {
                let (lo_us, _) = call_slot_bounds_us(slot);
                let at = (log2_slot(lo_us * 1000) as usize).min(SLOTS - 1);
                out.slots[at] += n;
            }
        }
        out
    }
}

/// Per process and disk: the calls of one interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallDelta {
    pub tgid: u32,
    pub comm: String,
    pub disk: Dev,
    pub hist: CallHist,
}

/// Per process: the pauses of one interval and the write-back state at the last one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PauseDelta {
    pub tgid: u32,
    pub comm: String,
    pub pauses: u64,
    pub pause_ns: u64,
    pub last: DirtyState,
}

/// The write-back state at a process's last pause.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct DirtyState {
    /// The backing device's name: `major:minor` for a block device.
    pub bdi: String,
    pub limit_bytes: u64,
    pub dirty_bytes: u64,
    pub wb_dirty_bytes: u64,
}

impl DirtyState {
    /// The block device behind the `bdi`, when it is one.
    pub fn dev(&self) -> Option<Dev> {
        let (major, minor) = self.bdi.split_once(':')?;
        Some(Dev::new(major.parse().ok()?, minor.parse().ok()?))
    }
}

/// The previous sample's cumulative figures, for differences.
#[derive(Debug, Default)]
pub(super) struct ThrottleBook {
    calls: HashMap<(u32, Dev), DioCallTotals>,
    pauses: HashMap<u32, (u64, u64)>,
}

impl ThrottleBook {
    pub(super) fn baseline(&mut self, sample: &KernelSample) {
        self.calls = sample
            .dio_calls
            .iter()
            .map(|t| ((t.tgid, t.fs_dev), t.clone()))
            .collect();
        self.pauses = sample
            .dirty_pauses
            .iter()
            .map(|p| (p.tgid, (p.pauses, p.pause_ms)))
            .collect();
    }

    /// The calls and pauses since the previous sample. A process missing from the kernel map
    /// (exited, or evicted from the LRU map) starts again from zero; so does one whose count
    /// went down (evicted and created again).
    pub(super) fn interval(&mut self, sample: &KernelSample) -> (Vec<CallDelta>, Vec<PauseDelta>) {
        let mut calls: Vec<CallDelta> = Vec::new();
        let mut now = HashMap::with_capacity(sample.dio_calls.len());
        for totals in &sample.dio_calls {
            let key = (totals.tgid, totals.fs_dev);
            let prev = self.calls.get(&key).filter(|p| p.calls <= totals.calls);
            let mut hist = CallHist {
                calls: totals.calls - prev.map_or(0, |p| p.calls),
                sum_ns: totals.sum_ns.saturating_sub(prev.map_or(0, |p| p.sum_ns)),
                ..CallHist::default()
            };
            for (slot, out) in hist.slots.iter_mut().enumerate() {
                let now = totals.slots.get(slot).copied().unwrap_or(0);
                let before = prev.and_then(|p| p.slots.get(slot)).copied().unwrap_or(0);
                *out = u64::from(now.wrapping_sub(before));
            }
            if hist.calls > 0 {
                match calls
                    .iter_mut()
                    .find(|c| c.tgid == totals.tgid && c.disk == totals.disk)
                {
                    Some(same_disk) => same_disk.hist.merge(&hist),
                    None => calls.push(CallDelta {
                        tgid: totals.tgid,
                        comm: totals.comm.clone(),
                        disk: totals.disk,
                        hist,
                    }),
                }
            }
            now.insert(key, totals.clone());
        }
        self.calls = now;
        let page = u64::from(sample.page_size.max(1));
        let mut pauses = Vec::new();
        let mut now = HashMap::with_capacity(sample.dirty_pauses.len());
        for p in &sample.dirty_pauses {
            let (before, before_ms) = self
                .pauses
                .get(&p.tgid)
                .copied()
                .filter(|&(n, _)| n <= p.pauses)
                .unwrap_or((0, 0));
            if p.pauses > before {
                pauses.push(PauseDelta {
                    tgid: p.tgid,
                    comm: p.comm.clone(),
                    pauses: p.pauses - before,
                    pause_ns: p
                        .pause_ms
                        .saturating_sub(before_ms)
                        .saturating_mul(1_000_000),
                    last: dirty_state(p, page),
                });
            }
            now.insert(p.tgid, (p.pauses, p.pause_ms));
        }
        self.pauses = now;
        (calls, pauses)
    }
}

fn dirty_state(p: &DirtyPauseTotals, page: u64) -> DirtyState {
    DirtyState {
        bdi: p.bdi.clone(),
        limit_bytes: p.limit_pages.saturating_mul(page),
        dirty_bytes: p.dirty_pages.saturating_mul(page),
        wb_dirty_bytes: p.wb_dirty_pages.saturating_mul(page),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_a_slot_width() {
        let mut hist = CallHist::default();
        for i in 0..1000u64 {
            hist.record(50_000 + i * 10); // 50-60 us
        }
        for _ in 0..30 {
            hist.record(100_000_000); // 100 ms
        }
        let p50 = hist.quantile(0.5);
        assert!((48_000..=64_000).contains(&p50), "{p50}");
        let p99 = hist.quantile(0.99);
        assert!(
            p99.abs_diff(100_000_000) * 8 <= 100_000_000,
            "within 12.5%: {p99}"
        );
        assert_eq!(CallHist::default().quantile(0.99), 0);
        assert_eq!(hist.mean_ns(), hist.sum_ns / 1030);
    }

    #[test]
    fn excess_counts_only_what_lies_beyond_the_reference() {
        let mut hist = CallHist::default();
        for _ in 0..100 {
            hist.record(100_000); // 100 us
        }
        assert_eq!(hist.excess_over(1_000_000), 0, "all below 1 ms");
        for _ in 0..10 {
            hist.record(50_000_000); // 50 ms
        }
        let excess = hist.excess_over(1_000_000);
        // 10 calls of ~49 ms beyond the reference (the slot [49.152, 57.344) ms).
        assert!((480_000_000..=540_000_000).contains(&excess), "{excess}");
        assert!(hist.excess_over(0) >= hist.sum_ns * 8 / 10);
    }

    #[test]
    fn log2_view_keeps_every_call() {
        let mut hist = CallHist::default();
        for ns in [500, 1_500, 3_000, 10_000, 1_000_000, 90_000_000_000] {
            hist.record(ns);
        }
        let log2 = hist.log2();
        assert_eq!(log2.total(), 6);
        assert_eq!(log2.slots[0], 1, "<1 us");
        assert_eq!(log2.slots[1], 1, "1-2 us");
        assert_eq!(log2.slots[2], 1, "2-4 us");
        assert_eq!(log2.slots[4], 1, "8-16 us");
    }

    fn totals(tgid: u32, calls: u64, slots: Vec<u32>) -> DioCallTotals {
        DioCallTotals {
            tgid,
            comm: "fio".into(),
            fs_dev: Dev::new(7, 0),
            disk: Dev::new(7, 0),
            calls,
            sum_ns: calls * 1000,
            slots,
        }
    }

    #[test]
    fn differences_wrap_and_restart() {
        let mut book = ThrottleBook::default();
        let mut sample = KernelSample {
            dio_calls: vec![totals(1, 10, vec![0, u32::MAX - 1])],
            ..KernelSample::default()
        };
        book.baseline(&sample);
        // The kernel's u32 slot wrapped: MAX - 1 -> 1 is 3 more calls.
        sample.dio_calls = vec![totals(1, 13, vec![0, 1])];
        let (calls, _) = book.interval(&sample);
        assert_eq!(calls[0].hist.calls, 3);
        assert_eq!(calls[0].hist.slots[1], 3);
        assert_eq!(calls[0].hist.slots.iter().sum::<u64>(), 3);
        // Evicted and created again: the count went down, everything is new.
        sample.dio_calls = vec![totals(1, 5, vec![0, 5])];
        let (calls, _) = book.interval(&sample);
        assert_eq!((calls[0].hist.calls, calls[0].hist.slots[1]), (5, 5));
        // Nothing new: no delta.
        let (calls, _) = book.interval(&sample);
        assert!(calls.is_empty());
    }

    #[test]
    fn pauses_per_interval_with_the_last_state() {
        let mut book = ThrottleBook::default();
        let pause = |pauses, pause_ms| DirtyPauseTotals {
            tgid: 9,
            comm: "dd".into(),
            pauses,
            pause_ms,
            limit_pages: 2048,
            dirty_pages: 2100,
            wb_dirty_pages: 2000,
            bdi: "7:3".into(),
        };
        let mut sample = KernelSample {
            page_size: 4096,
            dirty_pauses: vec![pause(4, 100)],
            ..KernelSample::default()
        };
        book.baseline(&sample);
        sample.dirty_pauses = vec![pause(10, 700)];
        let (_, pauses) = book.interval(&sample);
        assert_eq!(pauses.len(), 1);
        assert_eq!((pauses[0].pauses, pauses[0].pause_ns), (6, 600_000_000));
        assert_eq!(pauses[0].last.limit_bytes, 8 << 20);
        assert_eq!(pauses[0].last.dev(), Some(Dev::new(7, 3)));
        let (_, pauses) = book.interval(&sample);
        assert!(pauses.is_empty(), "no new pause");
    }
}
