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

/// The name a workload runs under (its `comm`, what every tool shows): its pattern's, so
/// that `‼ CRIT write_amplification lab001` on a projector does not read as the tool's
/// fault, as `iotop-bpf (pid 4226)` did. The subcommand's own name, so it can be typed back.
pub fn name(workload: &Workload) -> &'static str {
    match workload {
        Workload::DirectIo(_) => "direct-io",
        Workload::SmallSync(_) => "small-sync",
        Workload::Dstate(_) => "dstate",
        Workload::DioTail(_) => "dio-tail",
        Workload::Healthy(_) => "healthy",
        Workload::Lab001(_) => "lab001",
        Workload::AioRandwrite(_) => "aio-randwrite",
    }
}

/// Sets the calling thread's `comm`; threads and processes it starts afterwards (the forked
/// jobs of `aio-randwrite`, the vfork child of `dstate`) inherit it. A name that cannot be
/// set leaves the old one: a label, not a reason to fail the workload.
fn set_name(name: &str) {
    let Ok(name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (the kernel keeps its first 15
    // bytes); `name` outlives the call.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0);
    }
}

/// Runs a workload, on the calling thread (the main thread: its name is the process's).
pub fn run(workload: &Workload) -> Result<()> {
    set_name(name(workload));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Typed {
        #[command(subcommand)]
        workload: Workload,
    }

    #[test]
    fn a_workload_runs_under_the_name_it_is_typed_as() {
        for args in [
            ["lab001"].as_slice(),
            &["dio-tail"],
            &["dstate"],
            &["small-sync"],
            &["healthy"],
            &["aio-randwrite"],
            &["direct-io", "--file", "/x"],
        ] {
            let typed = <Typed as clap::Parser>::try_parse_from(
                std::iter::once("workload").chain(args.iter().copied()),
            )
            .unwrap();
            let name = name(&typed.workload);
            assert_eq!(name, args[0]);
            assert!(name.len() <= 15, "{name} is cut in a comm");
        }
    }

    #[test]
    fn the_name_is_what_the_kernel_shows() {
        // In a thread of its own: the name is the calling thread's, and the test runner's
        // threads are not to be renamed.
        std::thread::spawn(|| {
            set_name("lab001");
            let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            assert_eq!(comm.trim_end(), "lab001");
        })
        .join()
        .unwrap();
    }
}
