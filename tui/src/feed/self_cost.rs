//! What iotop-bpf itself costs: the probes' BPF time (from the kernel's per-program run-time
//! statistics) and this process's CPU time.
//!
//! The kernel keeps BPF run times only while statistics are enabled, and keeping them adds
//! two clock reads to every run of every BPF program on the host. When
//! `kernel.bpf_stats_enabled` is 1 they are used as they are; otherwise the tool enables them
//! itself (`BPF_ENABLE_STATS`, released when its fd closes) for one interval in every
//! [`SAMPLE_EVERY`], so the figure shown is at most that old.

use std::os::fd::OwnedFd;

use iotop_bpf_probe::{Probes, control};

use crate::model::SelfCost;

/// One interval in this many is measured when the statistics are not on for the host.
pub const SAMPLE_EVERY: u64 = 10;

#[derive(Default)]
pub struct SelfCostMeter {
    samples: u64,
    /// Held while the tool has the statistics enabled.
    stats: Option<OwnedFd>,
}

fn sysctl_on() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|v| v.trim() == "1")
}

/// CPU time of this process (user and system), ns.
fn cpu_ns() -> u64 {
    // SAFETY: getrusage writes into a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    let ns = |tv: libc::timeval| {
        u64::try_from(tv.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(tv.tv_usec).unwrap_or(0) * 1_000
    };
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

impl SelfCostMeter {
    /// The cumulative costs now; then turns the statistics on or off for the next interval.
    pub fn sample(&mut self, probes: &Probes) -> SelfCost {
        let host_on = sysctl_on();
        let (run_ns, runs) = probes.run_time();
        let cost = SelfCost {
            bpf_run_ns: run_ns,
            bpf_runs: runs,
            bpf_stats_on: host_on || self.stats.is_some(),
            bpf_stats_sampled: !host_on,
            cpu_ns: cpu_ns(),
        };
        if host_on || self.stats.is_some() {
            self.stats = None;
        } else if self.samples.is_multiple_of(SAMPLE_EVERY) {
            // Without CAP_SYS_ADMIN this fails: then there is no figure unless the host
            // keeps the statistics.
            self.stats = control::enable_run_time_stats();
        }
        self.samples += 1;
        cost
    }
}
