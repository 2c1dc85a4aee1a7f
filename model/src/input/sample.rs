//! The periodic kernel and host samples the model is fed: per-disk and per-process totals,
//! counters, limits and settings (moved out of `input.rs` to keep it short).

use super::*;

/// Per-disk totals kept by the probes in the kernel, cumulative since they were loaded:
/// exact even when the ring buffer drops records.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DiskTotals {
    pub dev: Dev,
    pub requests: [u64; OP_COUNT],
    pub bytes: [u64; OP_COUNT],
    /// Sum of request latency (created -> completed) per op, ns.
    pub latency_ns: [u64; OP_COUNT],
    pub errors: u64,
    pub queue_ns: u64,
    pub device_ns: u64,
    pub total_hist: [u64; SLOTS],
    pub queue_hist: [u64; SLOTS],
    pub device_hist: [u64; SLOTS],
    /// Requests that went through an I/O scheduler, and their queue time split as btt does:
    /// created -> inserted (G2I) and inserted -> issued (I2D), ns sums.
    /// Absent from recordings made before the split: zero.
    #[serde(default)]
    pub inserted: u64,
    #[serde(default)]
    pub g2i_ns: u64,
    #[serde(default)]
    pub i2d_ns: u64,
}

/// The probes' own counters, cumulative.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernelCounters {
    /// Records lost because the ring buffer was full.
    pub ring_dropped: u64,
    pub complete_without_start: u64,
    pub issue_without_start: u64,
    pub read_failed: u64,
    pub in_flight_evicted: u64,
    /// Records put in the ring buffer (with `ring_dropped`: every record produced).
    #[serde(default)]
    pub ring_submitted: u64,
    /// Requests summed per (process, disk) instead of streamed, those streamed as the counted
    /// sample, and those streamed because the map was full (aggregation mode).
    #[serde(default)]
    pub aggregated: u64,
    #[serde(default)]
    pub sampled: u64,
    #[serde(default)]
    pub aggregate_full: u64,
    /// Open syncs dropped from a full set of the probes' per-thread table (records lost).
    #[serde(default)]
    pub sync_evicted: u64,
}

/// What the tool itself costs, cumulative.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SelfCost {
    /// Time the probes ran, and how many runs, while the kernel kept BPF statistics.
    pub bpf_run_ns: u64,
    pub bpf_runs: u64,
    /// Whether the kernel kept them during the whole interval this sample closes.
    pub bpf_stats_on: bool,
    /// The statistics are on only now and then (`kernel.bpf_stats_enabled` is 0 and the
    /// tool turns them on for one interval in a while).
    pub bpf_stats_sampled: bool,
    /// CPU time of this process (user + system).
    pub cpu_ns: u64,
}

/// `/proc/diskstats` figures the probes do not measure (time the disk was busy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DiskStat {
    pub dev: Dev,
    /// Milliseconds with at least one request in flight (`io_ticks`).
    pub io_ticks_ms: u64,
    /// Requests merged into others before issue (reads, writes): iostat's rrqm, wrqm.
    #[serde(default)]
    pub read_merges: u64,
    #[serde(default)]
    pub write_merges: u64,
}

/// What a sample does to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleKind {
    /// Taken when the probes were attached: the kernel's cumulative counters and /proc figures
    /// at the start, so the first interval is a difference like every other one.
    Baseline,
    /// Closes an interval.
    #[default]
    Interval,
    /// Closes the last interval (quit, SIGINT, `-n`): every pending journal charge is settled
    /// first, so the last report is complete.
    Final,
}

/// Sizes the kernel reports for a block device (`/sys/block/*/queue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DiskGeometry {
    pub dev: Dev,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    /// `minimum_io_size`: the smallest request the device handles without a penalty.
    pub minimum_io_size: u32,
    /// The device honours FUA writes itself (`queue/fua`); otherwise the block layer drops the
    /// flag and follows the write with a cache flush.
    #[serde(default)]
    pub fua: bool,
}

/// A process exited (its last thread left): its state can go once its figures are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessExit {
    pub tgid: u32,
    pub ts_ns: u64,
}

/// Everything the model is fed, in order. The live probes and a recording produce the same
/// sequence; time enters only through the timestamps in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    Block(BlockIo),
    Sync(SyncCall),
    Dio(DioCall),
    #[serde(rename = "dstate")]
    DState(DStateEpisode),
    Exit(ProcessExit),
    /// Ring-buffer records that could not be decoded.
    BadRecords(u64),
    Sample(Box<KernelSample>),
}

/// What the feed samples from the kernel at the end of each interval.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernelSample {
    #[serde(default)]
    pub kind: SampleKind,
    /// `CLOCK_MONOTONIC`, the clock of the event timestamps.
    pub now_ns: u64,
    pub counters: KernelCounters,
    pub disks: Vec<DiskTotals>,
    pub diskstats: Vec<DiskStat>,
    /// Bytes each process asked to write (write syscalls), cumulative: (tgid, bytes).
    pub logical_writes: Vec<(u32, u64)>,
    /// The commands of those writers, as the kernel saw them at their first write: a
    /// process that writes but never reaches a disk itself still gets a row.
    #[serde(default)]
    pub writers: Vec<(u32, Comm)>,
    /// Threads in D state at `now_ns`.
    pub dstate_now: Vec<DStateNow>,
    /// Time each process spent in finished D episodes, cumulative: (tgid, ns).
    pub dstate_time: Vec<(u32, u64)>,
    /// Device names (`/sys/block/*/dev`), e.g. `7:0` -> `loop0`.
    pub names: Vec<(Dev, String)>,
    /// The cgroups requests were issued for in this interval, named.
    #[serde(default)]
    pub cgroups: Vec<CgroupInfo>,
    /// Block sizes of the disks.
    #[serde(default)]
    pub geometry: Vec<DiskGeometry>,
    /// The memory page size (`sysconf(_SC_PAGESIZE)`): the unit the page cache writes in.
    #[serde(default)]
    pub page_size: u32,
    #[serde(default)]
    pub self_cost: SelfCost,
    /// Host-wide load, run queue, CPU time, I/O pressure and dirty memory (recordings made
    /// before it was sampled replay without it: every figure `None`).
    #[serde(default)]
    pub host: HostSample,
    /// What each process's direct I/O calls took, per filesystem, cumulative (kernel
    /// aggregate of `iomap_dio_rw_begin` -> `iomap_dio_complete`).
    #[serde(default)]
    pub dio_calls: Vec<DioCallTotals>,
    /// The pauses dirty throttling imposed on each process's buffered writers, cumulative.
    #[serde(default)]
    pub dirty_pauses: Vec<DirtyPauseTotals>,
    /// `vm.dirty_*`, read when a process was paused (else `None`).
    #[serde(default)]
    pub dirty_settings: Option<DirtySettings>,
    /// The cgroup and I/O limits of processes with direct I/O calls or dirty pauses in the
    /// interval (read by the feed from /proc and the cgroup filesystems).
    #[serde(default)]
    pub io_limits: Vec<IoLimits>,
    /// Direct I/O call latency was being measured when the sample was taken (it is measured
    /// on demand: `IOTOP_BPF_CALL_LATENCY`).
    #[serde(default)]
    pub call_latency_on: bool,
    /// The I/O scheduler of each disk that has one (not `none`), from sysfs.
    #[serde(default)]
    pub schedulers: Vec<(Dev, String)>,
    /// The probes were summing plain requests per (process, disk) rather than streaming
    /// them (aggregation mode, past a measured rate) when the sample was taken.
    #[serde(default)]
    pub aggregating: bool,
    /// Their sums per (process, disk), cumulative (empty while never aggregating).
    #[serde(default)]
    pub proc_disks: Vec<ProcDiskTotals>,
    /// What the processes that read from a disk in the interval asked for, cumulative, from
    /// /proc (recordings made before it replay without it: no read amplification judged).
    #[serde(default)]
    pub proc_reads: Vec<ProcReadTotals>,
    /// The paths of the files readahead reads read in the interval (the feed names them from
    /// the readers' open fds and mappings).
    #[serde(default)]
    pub file_names: Vec<(crate::FileKey, String)>,
}

/// What a process asked to read, cumulative since it started (`/proc/PID/stat`'s major
/// faults, `/proc/PID/io`'s `rchar`): set against what its reads cost the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcReadTotals {
    pub tgid: u32,
    /// Page faults that had to read (each asked for a page; the kernel read around it).
    pub major_faults: u64,
    /// Page faults served from memory: pages read around an earlier fault (or ahead) that
    /// the process then used, and anonymous memory (an upper bound of the pages it touched).
    #[serde(default)]
    pub minor_faults: u64,
    /// Bytes its read system calls returned (read, pread64, readv, sendfile,
    /// copy_file_range; from the page cache or not).
    pub read_chars: u64,
    /// It started after the probes did: its totals are all within the run, and its first
    /// sample counts from zero.
    pub young: bool,
}

/// Host-wide figures for the header, raw as the kernel prints them: cumulative (CPU jiffies)
/// or instantaneous (the rest). The model computes rates. `None`: the source was missing or
/// unreadable (a kernel without PSI, an old recording), which is not the same as zero.
///
/// Load and pressure averages are kept in hundredths: the kernel prints them with exactly two
/// decimals, so integers keep them exact (and the sample comparable with `Eq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HostSample {
    /// `/proc/loadavg`.
    pub load: Option<LoadAvg>,
    /// `/proc/stat`: runnable tasks now, and tasks waiting for I/O now (`nr_iowait`: tasks in
    /// `io_schedule`, not every task in D state).
    pub procs_running: Option<u32>,
    pub procs_blocked: Option<u32>,
    /// `/proc/stat`'s aggregate `cpu` line.
    pub cpu: Option<CpuJiffies>,
    /// `/proc/pressure/io`: share of the last 10 s in which some (all) non-idle tasks were
    /// stalled on I/O, in hundredths of a percent.
    pub psi_io_some_avg10_hundredths: Option<u32>,
    pub psi_io_full_avg10_hundredths: Option<u32>,
    /// `/proc/meminfo`: page cache waiting to be written (`Dirty:`), and being written now
    /// (`Writeback:`).
    pub dirty_bytes: Option<u64>,
    pub writeback_bytes: Option<u64>,
}

/// The load averages over 1, 5 and 15 minutes, in hundredths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LoadAvg {
    pub one_hundredths: u32,
    pub five_hundredths: u32,
    pub fifteen_hundredths: u32,
}

/// Time all CPUs spent in each state since boot, in `USER_HZ` ticks (jiffies as
/// `/proc/stat` prints them). Guest time is part of user and nice already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuJiffies {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

/// A process's direct I/O calls on one filesystem, cumulative since the probes were loaded.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DioCallTotals {
    pub tgid: u32,
    /// Its name from /proc (empty when it was gone before the feed looked).
    pub comm: String,
    pub fs_dev: Dev,
    /// The whole disk below the filesystem (the device of its requests).
    pub disk: Dev,
    pub calls: u64,
    /// Sum of the calls' latencies, ns.
    pub sum_ns: u64,
    /// Calls per quarter-octave slot (`iotop_bpf_common::throttle::call_slot`): wrapping
    /// `u32` counters, so differences are taken with wrapping arithmetic.
    pub slots: Vec<u32>,
}

/// A process's pauses in `balance_dirty_pages()`, cumulative, and the write-back state at its
/// last pause.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DirtyPauseTotals {
    pub tgid: u32,
    pub comm: String,
    pub pauses: u64,
    pub pause_ms: u64,
    /// The dirty limit it was held to, the dirty pages then, and those of the device being
    /// written back, in pages.
    pub limit_pages: u64,
    pub dirty_pages: u64,
    pub wb_dirty_pages: u64,
    /// The backing device (`bdi`): `major:minor` for a block device.
    pub bdi: String,
}

/// The write-back knobs (`/proc/sys/vm/dirty_*`): a `*_bytes` of 0 means the ratio applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DirtySettings {
    pub dirty_bytes: u64,
    pub dirty_ratio: u64,
    pub background_bytes: u64,
    pub background_ratio: u64,
}

/// What a cgroup I/O limit caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    ReadBps,
    WriteBps,
    ReadIops,
    WriteIops,
}

impl LimitKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadBps => "read_bps",
            Self::WriteBps => "write_bps",
            Self::ReadIops => "read_iops",
            Self::WriteIops => "write_iops",
        }
    }
}

/// One blk-throttle limit on the way of a process's I/O: cgroup v1
/// `blkio.throttle.<kind>_device` or a v2 `io.max` key, set in its cgroup or an ancestor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoLimit {
    pub dev: Dev,
    pub kind: LimitKind,
    pub value: u64,
    /// The file that sets it, e.g. `/sys/fs/cgroup/blkio/db/blkio.throttle.write_iops_device`.
    pub file: String,
}

/// A process's cgroup and the I/O controls configured on its way.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IoLimits {
    pub tgid: u32,
    /// `blkio:/db` (its cgroup-v1 blkio group) or `/system.slice/db.service` (v2).
    pub cgroup: String,
    pub limits: Vec<IoLimit>,
    /// Disks with iocost enabled (v2 `io.cost.qos` `enable=1`).
    pub iocost: Vec<Dev>,
    /// io.latency targets on its way: (disk, target in us).
    pub iolatency: Vec<(Dev, u64)>,
}

/// One (process, disk)'s summed requests, cumulative since the probes were loaded (as the
/// kernel keeps them, summed over CPUs). Histograms are sparse: (slot, count), ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcDiskTotals {
    pub tgid: u32,
    pub dev: Dev,
    pub comm: Comm,
    /// Reads, writes.
    pub requests: [u64; 2],
    pub bytes: [u64; 2],
    pub queue_ns: u64,
    pub device_ns: u64,
    /// Requests that began where the process's previous one on the disk ended (per CPU).
    pub sequential: u64,
    /// Total time in quarter-octave slots (`iotop_bpf_common::throttle::call_slot`).
    pub total: Vec<(u16, u64)>,
    /// Queue and device time in log2 slots (`iotop_bpf_common::hist::log2_slot`).
    pub queue: Vec<(u16, u64)>,
    pub device: Vec<(u16, u64)>,
    /// Sizes of reads and of writes in `iotop_bpf_common::aggregate::size_slot` slots.
    pub read_sizes: Vec<(u16, u64)>,
    pub write_sizes: Vec<(u16, u64)>,
}

impl ProcDiskTotals {
    /// Requests summed, reads and writes.
    pub fn count(&self) -> u64 {
        self.requests[0] + self.requests[1]
    }
}
