//! The wait before the request, user side: the kernel's per-process direct I/O call and
//! dirty-pause aggregates read at each sample, and the processes whose figures moved
//! annotated with their cgroup's I/O limits and `vm.dirty_*`.

use iotop_bpf_common::throttle::{CallKey, CallTotals, DirtyTotals};
use iotop_bpf_probe::{
    control::{self, Knobs},
    maps::PerCpuTable,
};

use super::{io_controls, mounts, switches::CallLatencySwitch};
use crate::model::{Comm, Dev, DioCallTotals, DirtyPauseTotals, DirtySettings, IoLimits};

/// Reads the kernel's per-process call-latency and dirty-pause aggregates, and annotates the
/// processes whose figures moved with their cgroup's I/O limits.
#[derive(Default)]
pub(super) struct ThrottleWatch {
    /// Calls (per process and filesystem) and pauses (per process) at the previous sample:
    /// a process whose figures moved is annotated. Bounded by the kernel maps' sizes; entries
    /// of exited processes go with them.
    seen_calls: std::collections::HashMap<CallKey, u64>,
    seen_pauses: std::collections::HashMap<u32, u64>,
    cgroups: io_controls::CgroupBook,
    switch: CallLatencySwitch,
}

/// What one sample read of the waits before the requests.
pub(super) struct ThrottleSample {
    pub(super) dio_calls: Vec<DioCallTotals>,
    pub(super) dirty_pauses: Vec<DirtyPauseTotals>,
    /// `vm.dirty_*`, read when a process's pauses moved.
    pub(super) dirty_settings: Option<DirtySettings>,
    /// The I/O limits of the processes whose calls or pauses moved.
    pub(super) io_limits: Vec<IoLimits>,
}

impl ThrottleWatch {
    pub(super) fn new(switch: CallLatencySwitch) -> Self {
        Self {
            switch,
            ..Self::default()
        }
    }

    /// Reads the aggregates and annotates the processes whose figures moved; first turns
    /// call latency on or off as its mode says.
    pub(super) fn sample(
        &mut self,
        calls: &mut PerCpuTable<CallKey, CallTotals>,
        pauses: &PerCpuTable<u32, DirtyTotals>,
        block_sizes: &mut mounts::BlockSizes,
        knobs: &mut Knobs,
        exited: &[u32],
        now_ns: u64,
    ) -> ThrottleSample {
        if self.switch.update(now_ns, knobs) {
            // Switched off: a call noted before must not pair with a completion seen after
            // measuring is switched on again (its kiocb reused by a call not noted).
            knobs.clear_calls_in_flight();
        }
        let mut moved = std::collections::BTreeSet::new();
        let mut gone = Vec::new();
        let mut dio_calls = Vec::new();
        for (key, per_cpu) in calls.entries() {
            if exited.contains(&key.tgid) {
                gone.push(key);
            }
            let fs_dev = Dev::from_kernel(key.fs_dev);
            let mut totals = DioCallTotals {
                tgid: key.tgid,
                comm: String::new(),
                fs_dev,
                disk: block_sizes.disk(fs_dev).disk,
                calls: 0,
                sum_ns: 0,
                slots: vec![0; iotop_bpf_common::throttle::CALL_SLOTS],
            };
            for cpu in per_cpu.iter() {
                totals.calls += cpu.calls;
                totals.sum_ns += cpu.sum_ns;
                for (sum, n) in totals.slots.iter_mut().zip(cpu.slots) {
                    *sum = sum.wrapping_add(n);
                }
            }
            // Trailing empty slots are left out (a recording keeps every sample).
            let used = totals
                .slots
                .iter()
                .rposition(|&n| n != 0)
                .map_or(0, |i| i + 1);
            totals.slots.truncate(used);
            if self.seen_calls.insert(key, totals.calls) != Some(totals.calls) {
                moved.insert(key.tgid);
            }
            dio_calls.push(totals);
        }
        let mut dirty_pauses = Vec::new();
        for (tgid, per_cpu) in pauses.entries() {
            let mut totals = DirtyPauseTotals {
                tgid,
                ..DirtyPauseTotals::default()
            };
            let mut last_ns = 0;
            for cpu in per_cpu.iter() {
                totals.pauses += cpu.pauses;
                totals.pause_ms += cpu.pause_ms;
                if cpu.pauses > 0 && cpu.last_ns >= last_ns {
                    last_ns = cpu.last_ns;
                    totals.comm = Comm::text(&cpu.comm);
                    totals.bdi = Comm::text(&cpu.bdi);
                    totals.limit_pages = cpu.limit_pages;
                    totals.dirty_pages = cpu.dirty_pages;
                    totals.wb_dirty_pages = cpu.wb_dirty_pages;
                }
            }
            if self.seen_pauses.insert(tgid, totals.pauses) != Some(totals.pauses) {
                moved.insert(tgid);
            }
            dirty_pauses.push(totals);
        }
        let mut io_limits = Vec::new();
        for &tgid in &moved {
            if let Some((comm, limits)) = self.cgroups.of(tgid, now_ns) {
                for totals in dio_calls.iter_mut().filter(|t| t.tgid == tgid) {
                    totals.comm.clone_from(&comm);
                }
                io_limits.push(limits);
            }
        }
        let dirty_settings = dirty_pauses
            .iter()
            .any(|p| moved.contains(&p.tgid))
            .then(read_dirty_settings);
        for key in &gone {
            self.seen_calls.remove(key);
        }
        control::forget(calls, gone);
        for tgid in exited {
            self.seen_pauses.remove(tgid);
            self.cgroups.forget(*tgid);
        }
        ThrottleSample {
            dio_calls,
            dirty_pauses,
            dirty_settings,
            io_limits,
        }
    }
}

impl ThrottleWatch {
    /// Whether direct I/O call latency is being measured now.
    pub(super) fn measuring(&self) -> bool {
        self.switch.on
    }
}

fn read_dirty_settings() -> DirtySettings {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    DirtySettings {
        dirty_bytes: read("dirty_bytes"),
        dirty_ratio: read("dirty_ratio"),
        background_bytes: read("dirty_background_bytes"),
        background_ratio: read("dirty_background_ratio"),
    }
}
