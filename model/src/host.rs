//! The host book: turns the raw host figures of each sample into the header's
//! [`HostFigures`]. Only the CPU time needs state (the previous sample's jiffies, for the
//! share of this interval spent in iowait); the rest are the kernel's own averages and
//! counts, passed through.

use super::{CpuJiffies, HostSample, snapshot::HostFigures};

#[derive(Debug, Default)]
pub struct HostBook {
    /// The aggregate CPU times at the previous sample.
    prev_cpu: Option<CpuJiffies>,
}

impl HostBook {
    /// The sample taken when the probes were attached: the first interval's iowait is a
    /// difference from it.
    pub fn baseline(&mut self, sample: &HostSample) {
        self.prev_cpu = sample.cpu;
    }

    /// The figures of the interval that `sample` closes.
    pub fn close(&mut self, sample: &HostSample) -> HostFigures {
        let iowait_pct = match (self.prev_cpu, sample.cpu) {
            (Some(before), Some(now)) => iowait_pct(&before, &now),
            _ => None,
        };
        self.prev_cpu = sample.cpu;
        let hundredths = |h: u32| f64::from(h) / 100.0;
        HostFigures {
            load1: sample.load.map(|l| hundredths(l.one_hundredths)),
            load5: sample.load.map(|l| hundredths(l.five_hundredths)),
            load15: sample.load.map(|l| hundredths(l.fifteen_hundredths)),
            procs_running: sample.procs_running,
            procs_blocked: sample.procs_blocked,
            iowait_pct,
            psi_io_some_avg10: sample.psi_io_some_avg10_hundredths.map(hundredths),
            psi_io_full_avg10: sample.psi_io_full_avg10_hundredths.map(hundredths),
            dirty_bytes: sample.dirty_bytes,
            writeback_bytes: sample.writeback_bytes,
        }
    }
}

/// Share of all CPUs' time between the two samples spent idle with I/O outstanding (vmstat's
/// `wa`): iowait / total jiffies. Each state's difference saturates at zero, because iowait
/// and idle can step back a little on NO_HZ kernels (the kernel's own documentation of
/// /proc/stat says iowait is unreliable that way) and a CPU taken offline takes its times
/// out of the sum. `None` when no time passed (two samples within the same tick).
fn iowait_pct(before: &CpuJiffies, now: &CpuJiffies) -> Option<f64> {
    let delta = |a: u64, b: u64| b.saturating_sub(a);
    let iowait = delta(before.iowait, now.iowait);
    let total = [
        delta(before.user, now.user),
        delta(before.nice, now.nice),
        delta(before.system, now.system),
        delta(before.idle, now.idle),
        iowait,
        delta(before.irq, now.irq),
        delta(before.softirq, now.softirq),
        delta(before.steal, now.steal),
    ]
    .iter()
    .fold(0u64, |sum, &d| sum.saturating_add(d));
    #[expect(clippy::cast_precision_loss, reason = "a percentage")]
    let pct = iowait as f64 * 100.0 / total as f64;
    (total > 0).then_some(pct)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LoadAvg;

    fn cpu(busy: u64, idle: u64, iowait: u64) -> CpuJiffies {
        CpuJiffies {
            user: busy,
            idle,
            iowait,
            ..CpuJiffies::default()
        }
    }

    fn host(cpu: Option<CpuJiffies>) -> HostSample {
        HostSample {
            load: Some(LoadAvg {
                one_hundredths: 210,
                five_hundredths: 150,
                fifteen_hundredths: 8,
            }),
            procs_running: Some(3),
            procs_blocked: Some(1),
            cpu,
            psi_io_some_avg10_hundredths: Some(1234),
            psi_io_full_avg10_hundredths: Some(300),
            dirty_bytes: Some(40 << 20),
            writeback_bytes: Some(0),
        }
    }

    #[test]
    fn iowait_is_the_share_of_the_interval_not_of_the_uptime() {
        let mut book = HostBook::default();
        // Since boot: 10% iowait. In the interval: 30 of 200 jiffies (2 CPUs, 1 s).
        book.baseline(&host(Some(cpu(80_000, 10_000, 10_000))));
        let figures = book.close(&host(Some(cpu(80_120, 10_050, 10_030))));
        assert_eq!(figures.iowait_pct, Some(15.0));
        // The next interval is measured from this one, not from the baseline.
        let figures = book.close(&host(Some(cpu(80_320, 10_050, 10_030))));
        assert_eq!(figures.iowait_pct, Some(0.0));
    }

    #[test]
    fn every_state_counts_in_the_total() {
        let mut book = HostBook::default();
        book.baseline(&host(Some(CpuJiffies::default())));
        let now = CpuJiffies {
            user: 1,
            nice: 1,
            system: 1,
            idle: 1,
            iowait: 2,
            irq: 1,
            softirq: 1,
            steal: 2,
        };
        assert_eq!(book.close(&host(Some(now))).iowait_pct, Some(20.0));
    }

    #[test]
    fn passes_the_kernels_averages_and_counts_through() {
        let figures = HostBook::default().close(&host(None));
        assert_eq!(figures.load1, Some(2.1));
        assert_eq!(figures.load5, Some(1.5));
        assert_eq!(figures.load15, Some(0.08));
        assert_eq!(
            (figures.procs_running, figures.procs_blocked),
            (Some(3), Some(1))
        );
        assert_eq!(figures.psi_io_some_avg10, Some(12.34));
        assert_eq!(figures.psi_io_full_avg10, Some(3.0));
        assert_eq!(figures.dirty_bytes, Some(40 << 20));
        assert_eq!(figures.writeback_bytes, Some(0));
    }

    #[test]
    fn no_iowait_without_a_previous_sample_or_without_time() {
        let mut book = HostBook::default();
        let first = book.close(&host(Some(cpu(100, 100, 10))));
        assert_eq!(first.iowait_pct, None, "no baseline, no previous: no rate");
        let same = book.close(&host(Some(cpu(100, 100, 10))));
        assert_eq!(same.iowait_pct, None, "no tick passed");
        let missing = book.close(&host(None));
        assert_eq!(missing.iowait_pct, None);
        let after_gap = book.close(&host(Some(cpu(200, 100, 10))));
        assert_eq!(
            after_gap.iowait_pct, None,
            "the previous sample had no CPU line"
        );
    }

    #[test]
    fn counters_stepping_back_do_not_wrap() {
        let mut book = HostBook::default();
        book.baseline(&host(Some(cpu(1000, 1000, 500))));
        // iowait went back by 5 (NO_HZ accounting): counted as 0, not as 2^64 - 5.
        let figures = book.close(&host(Some(cpu(1100, 1100, 495))));
        assert_eq!(figures.iowait_pct, Some(0.0));
    }

    #[test]
    fn an_old_recording_without_host_figures_gives_none_everywhere() {
        let mut book = HostBook::default();
        book.baseline(&HostSample::default());
        assert_eq!(book.close(&HostSample::default()), HostFigures::default());
        assert!(HostFigures::default().is_empty());
    }
}
