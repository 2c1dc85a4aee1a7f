//! Aggregation mode, user side: when to switch it on (past a measured rate of requests) and
//! the kernel's per-(process, disk) sums at each sample (see `iotop_bpf_common::aggregate`).

use iotop_bpf_common::aggregate::{ProcDiskAggregate, ProcDiskKey};
use iotop_bpf_probe::{
    control::{self, Knobs},
    maps::PerCpuTable,
};

use crate::model::{Comm, Dev, ProcDiskTotals};

/// Requests per second (all disks) from which the probes aggregate by default. Streaming
/// costs ~100 ns of this process's CPU per request (decoding, the books; the bench: 2.4% of
/// a core at 200k a second) and 128 bytes of ring each: past 250k a second that is over
/// 2.5% of a core, and the 4 MiB ring holds under 130 ms of records. Summed in the kernel, a
/// plain request costs no record and no user-space work.
pub const DEFAULT_ABOVE: u64 = 250_000;
/// The smallest alignment a summed request must have (the tail-write zeroing is smaller).
const MIN_ALIGN: u64 = 4096;
/// `IOTOP_BPF_AGGREGATE_ABOVE`: requests per second from which to aggregate (`0`: always),
/// or `never`.
pub const ENV: &str = "IOTOP_BPF_AGGREGATE_ABOVE";

/// When to aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// From this many requests a second on; back to streaming below half of it.
    Above(u64),
    Never,
}

impl Policy {
    /// From `IOTOP_BPF_AGGREGATE_ABOVE`, else the default; `Err` names a bad value.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(ENV) {
            Err(_) => Ok(Self::Above(DEFAULT_ABOVE)),
            Ok(v) if v.trim() == "never" => Ok(Self::Never),
            Ok(v) => v.trim().parse().map(Self::Above).map_err(|_| {
                format!("{ENV}={v}: expected requests per second (0: always) or `never`")
            }),
        }
    }

    /// Whether to aggregate at `rate` requests a second, aggregating now or not.
    pub fn decide(self, aggregating: bool, rate: u64) -> bool {
        match self {
            Self::Never => false,
            Self::Above(0) => true,
            // Hysteresis: a rate near the threshold does not flip the mode every second.
            Self::Above(above) if aggregating => rate >= above / 2,
            Self::Above(above) => rate >= above,
        }
    }
}

pub struct Aggregation {
    sums: PerCpuTable<ProcDiskKey, ProcDiskAggregate>,
    policy: Policy,
    /// The alignment written into the kernel (0: streaming).
    written: u64,
    ever_on: bool,
    /// Completed requests (all disks) and the time at the previous sample.
    prev: Option<(u64, u64)>,
}

impl Aggregation {
    pub fn new(sums: PerCpuTable<ProcDiskKey, ProcDiskAggregate>, policy: Policy) -> Self {
        Self {
            sums,
            policy,
            written: 0,
            ever_on: false,
            prev: None,
        }
    }

    pub fn on(&self) -> bool {
        self.written != 0
    }

    /// Decides the mode for the next interval from the rate of completed requests since the
    /// previous sample (`requests`: cumulative, all disks) and writes it into the kernel with
    /// the alignment a summed request needs (`largest_block`: the largest filesystem or
    /// physical block in use). Returns an error to report when the kernel refused the write.
    pub fn decide(
        &mut self,
        requests: u64,
        now_ns: u64,
        largest_block: u64,
        knobs: &mut Knobs,
    ) -> Result<(), String> {
        let rate = match self.prev.replace((requests, now_ns)) {
            Some((before, then)) if now_ns > then => {
                let per_ns = requests.saturating_sub(before) as f64 / (now_ns - then) as f64;
                (per_ns * 1e9) as u64
            }
            _ => 0,
        };
        let on = self.policy.decide(self.on(), rate);
        let align = if on { largest_block.max(MIN_ALIGN) } else { 0 };
        if align == self.written {
            return Ok(());
        }
        knobs
            .set_aggregate_align(align)
            .map_err(|e| format!("cannot switch aggregation mode: {e}"))?;
        self.written = align;
        self.ever_on |= on;
        Ok(())
    }

    /// The kernel's sums per (process, disk), cumulative; then the keys of `exited` processes
    /// are removed (this sample read their last values).
    pub fn sums(&mut self, exited: &[u32]) -> Vec<ProcDiskTotals> {
        if !self.ever_on {
            return Vec::new();
        }
        let mut gone = Vec::new();
        let totals: Vec<ProcDiskTotals> = self
            .sums
            .entries()
            .map(|(key, per_cpu)| {
                if exited.contains(&key.tgid) {
                    gone.push(key);
                }
                totals_of(key, per_cpu.iter())
            })
            .collect();
        control::forget(&mut self.sums, gone);
        totals
    }
}

/// One key's per-CPU values, summed; histograms made sparse.
fn totals_of<'a>(
    key: ProcDiskKey,
    per_cpu: impl Iterator<Item = &'a ProcDiskAggregate>,
) -> ProcDiskTotals {
    let mut t = ProcDiskTotals {
        tgid: key.tgid,
        dev: Dev::from_kernel(key.dev),
        ..ProcDiskTotals::default()
    };
    let mut total = vec![0u64; iotop_bpf_common::throttle::CALL_SLOTS];
    let mut queue = [0u64; iotop_bpf_common::hist::SLOTS];
    let mut device = [0u64; iotop_bpf_common::hist::SLOTS];
    let mut sizes = [[0u64; iotop_bpf_common::aggregate::SIZE_SLOTS]; 2];
    for v in per_cpu {
        for i in 0..2 {
            t.requests[i] += v.requests[i];
            t.bytes[i] += v.bytes[i];
        }
        t.queue_ns += v.queue_ns;
        t.device_ns += v.device_ns;
        t.sequential += v.sequential;
        for (sum, &n) in total.iter_mut().zip(&v.total_hist) {
            *sum += u64::from(n);
        }
        for (sum, &n) in queue.iter_mut().zip(&v.queue_hist) {
            *sum += u64::from(n);
        }
        for (sum, &n) in device.iter_mut().zip(&v.device_hist) {
            *sum += u64::from(n);
        }
        for (op, op_sizes) in sizes.iter_mut().enumerate() {
            for (sum, &n) in op_sizes.iter_mut().zip(&v.size_hist[op]) {
                *sum += u64::from(n);
            }
        }
        if v.comm[0] != 0 {
            t.comm = Comm::from_bytes(v.comm);
        }
    }
    let sparse = |slots: &[u64]| -> Vec<(u16, u64)> {
        slots
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(i, &n)| (u16::try_from(i).unwrap_or(u16::MAX), n))
            .collect()
    };
    t.total = sparse(&total);
    t.queue = sparse(&queue);
    t.device = sparse(&device);
    t.read_sizes = sparse(&sizes[0]);
    t.write_sizes = sparse(&sizes[1]);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_switches_past_the_rate_and_back_below_half() {
        let p = Policy::Above(250_000);
        assert!(!p.decide(false, 249_999));
        assert!(p.decide(false, 250_000));
        assert!(p.decide(true, 130_000), "hysteresis");
        assert!(!p.decide(true, 124_999));
        assert!(Policy::Above(0).decide(false, 0));
        assert!(!Policy::Never.decide(true, u64::MAX));
    }

    #[test]
    fn per_cpu_values_are_summed_and_made_sparse() {
        let mut a = ProcDiskAggregate::ZERO;
        a.requests = [3, 1];
        a.bytes = [3 * 4096, 8192];
        a.total_hist[40] = 4;
        a.size_hist[0][4] = 3;
        a.size_hist[1][5] = 1;
        let mut b = ProcDiskAggregate::ZERO;
        b.requests = [2, 0];
        b.bytes = [2 * 4096, 0];
        b.total_hist[40] = 1;
        b.total_hist[41] = 1;
        b.size_hist[0][4] = 2;
        b.comm = *b"fio\0\0\0\0\0\0\0\0\0\0\0\0\0";
        let t = totals_of(
            ProcDiskKey {
                tgid: 7,
                dev: (7 << 20) | 3,
            },
            [a, b].iter(),
        );
        assert_eq!((t.tgid, t.dev), (7, Dev::new(7, 3)));
        assert_eq!(t.requests, [5, 1]);
        assert_eq!(t.bytes, [5 * 4096, 8192]);
        assert_eq!(t.total, vec![(40, 5), (41, 1)]);
        assert_eq!(t.read_sizes, vec![(4, 5)]);
        assert_eq!(t.write_sizes, vec![(5, 1)]);
        assert_eq!(t.comm, Comm::new("fio"));
    }
}
