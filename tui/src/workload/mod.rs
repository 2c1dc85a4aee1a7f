//! Built-in workloads: reproducers of the classic pathologies (and of healthy I/O) for demos,
//! workshops and the end-to-end tests. They need no privileges, only a file system.

mod aio_randwrite;
mod dio_tail;
mod direct_io;
mod dstate;
mod healthy;
mod lab001;
mod small_sync;

use std::time::Duration;

use anyhow::Result;

use crate::cli::Workload;

pub fn run(workload: &Workload) -> Result<()> {
    match workload {
        Workload::DirectIo(args) => direct_io::run(args),
        Workload::SmallSync(args) => small_sync::run(args),
        Workload::Dstate(args) => dstate::run(args),
        Workload::DioTail(args) => dio_tail::run(args),
        Workload::Healthy(args) => healthy::run(args),
        Workload::Lab001(args) => lab001::run(args),
        Workload::AioRandwrite(args) => aio_randwrite::run(args),
    }
}

/// Latencies a workload measured around its own calls: the ground truth the end-to-end tests
/// compare iotop-bpf's figures with.
#[derive(Debug, Default)]
pub struct Measured {
    latencies: Vec<Duration>,
}

impl Measured {
    pub fn add(&mut self, latency: Duration) {
        self.latencies.push(latency);
    }

    /// (p50, max) in microseconds.
    pub fn p50_max_us(&mut self) -> (u128, u128) {
        self.latencies.sort_unstable();
        let at = |i: usize| self.latencies.get(i).map_or(0, Duration::as_micros);
        (
            at(self.latencies.len().saturating_sub(1) / 2),
            at(self.latencies.len().saturating_sub(1)),
        )
    }
}
