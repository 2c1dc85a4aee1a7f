//! fio itself: one run of a shape on the loop device, and what it did (IOPS, the disk's
//! completed requests, its calls, how busy the CPUs were meanwhile).

use std::fs;

use anyhow::{Context, Result, bail};

use super::{PerIo, Workload, budget};
use crate::util::{cmd, stdout_of};

/// Reads and writes a block device completed since it appeared: the kernel's own count.
fn disk_ios(dev: &str) -> Result<u64> {
    let name = dev.trim_start_matches("/dev/");
    let stat = fs::read_to_string(format!("/sys/block/{name}/stat"))
        .with_context(|| format!("reading /sys/block/{name}/stat"))?;
    let fields: Vec<u64> = stat
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    match (fields.first(), fields.get(4)) {
        (Some(reads), Some(writes)) => Ok(reads + writes),
        _ => bail!("unexpected /sys/block/{name}/stat: {stat}"),
    }
}

#[derive(Clone, Copy)]
pub(super) struct Fio {
    pub(super) iops: f64,
    /// Requests the disk completed while fio ran (its own counters, not fio's estimate).
    pub(super) requests: u64,
    /// fio's system calls (its I/Os, and the logger's fsyncs).
    pub(super) calls: u64,
    /// The share of all CPUs busy while fio ran (/proc/stat), and that as CPU time.
    pub(super) busy_share: f64,
    pub(super) busy_cpu_ns: f64,
    pub(super) cpus: u32,
}

impl Fio {
    /// The I/Os BPF time is divided by, for this shape.
    pub(super) fn ios(&self, workload: Workload) -> u64 {
        match workload.per_io() {
            PerIo::Request => self.requests,
            PerIo::Call => self.calls,
        }
    }
}

/// Runs fio on the device; `rate` caps the IOPS.
pub(super) fn fio(dev: &str, workload: Workload, seconds: u32, rate: Option<u32>) -> Result<Fio> {
    let before = disk_ios(dev)?;
    let cpu_before = budget::cpu_times()?;
    let started = std::time::Instant::now();
    let mut fio = cmd("fio");
    fio.args([
        "--name=r",
        &format!("--filename={dev}"),
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=terse",
    ])
    .args(workload.fio_args());
    if let Some(rate) = rate {
        fio.arg(format!("--rate_iops={rate}"));
    }
    let out = stdout_of(&mut fio)?;
    let wall_ns = started.elapsed().as_secs_f64() * 1e9;
    let cpu_after = budget::cpu_times()?;
    let requests = disk_ios(dev)?.saturating_sub(before);
    let busy_share = cpu_before.busy_share(cpu_after);
    // Terse v3: 1 version, 2 fio version, 3 job name, 4 group, 5 error, 6 read KiB,
    // 7 read KiB/s, 8 read IOPS, 9 read runtime (ms); the writes' same four at 47-50.
    let line = out
        .lines()
        .find(|l| l.starts_with("3;"))
        .context("no terse v3 line in fio's output")?;
    let fields: Vec<&str> = line.split(';').collect();
    let at = if workload.writes() { 48 } else { 7 };
    let number = |i: usize| -> Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("fio terse field {} is not a number: {line}", i + 1))
    };
    let iops = number(at)?;
    let runtime_ms = number(at + 1)?;
    if iops <= 0.0 {
        bail!("fio measured 0 IOPS: {line}");
    }
    #[expect(clippy::cast_possible_truncation, reason = "a count of calls")]
    #[expect(clippy::cast_sign_loss, reason = "positive")]
    let calls = (iops * runtime_ms / 1e3) as u64 * workload.calls_per_fio_io();
    Ok(Fio {
        iops,
        requests,
        calls,
        busy_share,
        busy_cpu_ns: busy_share * f64::from(cpu_after.cpus()) * wall_ns,
        cpus: cpu_after.cpus(),
    })
}
