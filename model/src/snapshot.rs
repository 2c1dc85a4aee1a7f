//! The model's output: plain, owned data describing one closed interval (and the totals since
//! start), ready for the views, the batch report and the JSON writer.

use super::{
    CgroupInfo, Dev, DiskGeometry, IoLimits, NoStack,
    hist::{Histogram, Latency, Log2Hist, SizeHist},
    throttle::{CallHist, DirtyState},
};

mod cgroups;
mod sync;
mod waits;
pub use cgroups::*;
pub use sync::*;
pub use waits::*;

/// Event accounting for the interval, and since start, and what the tool costs.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct EventStats {
    /// Records received from the ring buffer in this interval.
    pub received: u64,
    /// Records the kernel could not put in the ring buffer (it was full) in this interval.
    pub dropped: u64,
    /// Records that could not be decoded (short, unknown kind) in this interval.
    pub bad: u64,
    pub received_total: u64,
    pub dropped_total: u64,
    pub bad_total: u64,
    /// Completions of requests never seen created or issued (since start).
    pub unpaired_total: u64,
    /// Records the probes produced in this interval (put in the ring, or dropped).
    pub produced: u64,
    /// BPF time per completed block request, all probes together, ns; `None` before the
    /// kernel kept statistics for a whole interval.
    pub bpf_ns_per_io: Option<u64>,
    /// BPF time of all probes, percent of one CPU, in the last interval measured.
    pub bpf_cpu_pct: Option<f64>,
    /// Runs of all probes in this interval; `None` where the kernel did not keep statistics
    /// for the whole of it (a count, not a time: what a host's other system calls pay shows
    /// here as runs per call).
    #[serde(default)]
    pub bpf_runs: Option<u64>,
    /// It was measured in an earlier interval (the statistics are sampled, not always on).
    pub bpf_sampled: bool,
    /// CPU used by iotop-bpf itself, percent of one core; `None` when not measured
    /// (recordings made before it was recorded).
    pub cpu_pct: Option<f64>,
    /// Direct I/O call latency is being measured (on demand; see `model::throttle`).
    pub call_latency_on: bool,
    /// The probes sum plain requests per (process, disk) instead of streaming them
    /// (aggregation mode, past a measured rate).
    pub aggregating: bool,
    /// Requests summed in this interval, and those of them streamed as the counted sample.
    pub aggregated: u64,
    pub sampled: u64,
}

/// A disk's figures over some period (the interval, or since start).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct DiskFigures {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub others: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub discard_bytes: u64,
    pub errors: u64,
    /// Mean latency of reads and writes, ns (iostat's r_await, w_await).
    pub read_await_ns: u64,
    pub write_await_ns: u64,
    /// Time cache flushes took, summed (created -> completed), ns.
    pub flush_time_ns: u64,
    /// Average number of requests in flight (iostat's aqu-sz).
    pub queue_size: f64,
    /// Percentage of time the disk had a request in flight (iostat's %util).
    pub util_pct: f64,
    /// Requests merged into others before issue (iostat's rrqm, wrqm; /proc/diskstats).
    pub read_merges: u64,
    pub write_merges: u64,
    /// Requests that went through an I/O scheduler, and their queue time split as btt
    /// does: created -> inserted (G2I: plugged) and inserted -> issued (I2D: in the
    /// scheduler). Exact kernel counts and sums (btt's averages); zero without a scheduler.
    pub inserted: u64,
    pub g2i_sum_ns: u64,
    pub i2d_sum_ns: u64,
    /// Total, queue and device latency from the kernel's log2 histograms (exact counts).
    pub total_hist: Log2Hist,
    pub queue_hist: Log2Hist,
    pub device_hist: Log2Hist,
    /// Exact sums of total, queue and device time over the requests the histograms count,
    /// ns (kept in the kernel, so with the histograms' counts they give exact means).
    pub latency_sum_ns: u64,
    pub queue_sum_ns: u64,
    pub device_sum_ns: u64,
    /// Sizes of read and write requests, from the per-request records (a sample if records
    /// dropped).
    pub read_size_hist: SizeHist,
    pub write_size_hist: SizeHist,
    /// Percentiles from the per-request records (fine-grained; a sample if records dropped).
    pub latency: Latency,
    pub queue: Latency,
    pub device: Latency,
}

impl DiskFigures {
    pub fn requests(&self) -> u64 {
        self.reads + self.writes + self.flushes + self.discards + self.others
    }

    /// Mean time plugged before the scheduler (btt's G2I) and in it (I2D), ns, over the
    /// requests that went through a scheduler; `None` when none did.
    pub fn scheduler_split_ns(&self) -> Option<(u64, u64)> {
        let n = self.inserted;
        (n > 0).then(|| (self.g2i_sum_ns / n, self.i2d_sum_ns / n))
    }
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct DiskRow {
    pub dev: Dev,
    /// `loop0`, `nvme0n1`, or `major:minor` when the name is unknown.
    pub name: String,
    /// Its block sizes (zeros when unknown).
    pub geometry: DiskGeometry,
    /// Its I/O scheduler (`mq-deadline`, `bfq`, ...); `None` for `none` or unknown. Only
    /// then do its figures split queue time at the insert (G2I / I2D).
    pub scheduler: Option<String>,
    pub interval: DiskFigures,
    pub total: DiskFigures,
}

/// A process's I/O over some period.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ProcFigures {
    pub reads: u64,
    /// Writes that carried data.
    pub writes: u64,
    /// Flushes, discards and other requests.
    pub others: u64,
    /// Cache flushes (of `others`): flush requests and writes without data.
    pub flushes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub latency: Latency,
    pub queue: Latency,
    pub device: Latency,
    pub queue_hist: Log2Hist,
    pub device_hist: Log2Hist,
    pub total_hist: Log2Hist,
    /// Bytes it asked to write in write syscalls to regular files and block devices (not
    /// pipes, sockets or terminals: their bytes never reach a disk).
    pub logical_write_bytes: u64,
    /// Write requests with the FUA flag (made durable by the device on their own) to disks
    /// that honour it.
    pub fua_writes: u64,
    pub sync: SyncFigures,
    /// Time its threads spent in D state (uninterruptible sleep), summed over threads.
    pub dstate_ns: u64,
    /// Request sizes, byte-exact: (bytes, count), ascending.
    pub write_sizes: Vec<(u32, u64)>,
    pub read_sizes: Vec<(u32, u64)>,
    /// Requests that began where its previous request to the same disk ended.
    pub sequential: u64,
    /// Its direct I/O calls that are not aligned to the largest block size in use.
    pub dio: DioFigures,
    /// Bytes flushers wrote back for it (pages it dirtied), and by whom.
    pub writeback_bytes: u64,
    pub written_back_by: Vec<Party>,
    /// As a flusher: bytes of write-back it wrote for processes the probes could name (its
    /// own write requests, also counted in `write_bytes`), and for whom.
    pub wrote_back_bytes: u64,
    pub wrote_back_for: Vec<Party>,
    /// Its direct I/O calls and dirty-throttling pauses: the waits its requests do not show.
    pub waits: Waits,
    /// Its reads against what it asked for (read amplification).
    #[serde(default)]
    pub read_demand: ReadFigures,
}

/// A process's reads against what it asked for: the device's read requests (readahead
/// ones per file) and, from /proc, its major faults and the bytes its read calls returned.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadFigures {
    /// Read requests, and those that began where its previous request to the disk ended.
    pub requests: u64,
    pub sequential: u64,
    /// Readahead reads (`REQ_RAHEAD`): the page cache reading ahead of, or around, a page
    /// asked for.
    pub readahead_requests: u64,
    pub readahead_bytes: u64,
    /// Readahead bytes per file (path, else `inode N on M:m`), the most read first.
    pub files: Vec<(String, u64)>,
    /// Page faults that had to read, and the bytes its read calls returned (from /proc;
    /// `asked_known` false: not sampled, e.g. a process that started before the probes and
    /// was first seen this interval).
    pub major_faults: u64,
    /// Faults served from memory: pages read around earlier faults that it then touched
    /// (and anonymous memory): counted as asked, so a program loading its code or scanning a
    /// mapping is not judged by its major faults alone.
    #[serde(default)]
    pub minor_faults: u64,
    pub read_call_bytes: u64,
    pub asked_known: bool,
}

impl ProcFigures {
    /// Write bytes charged to it: those of its own requests, less the write-back it wrote for
    /// others, plus the write-back others wrote for it. Over all processes these add up to
    /// the disks' write bytes, each byte counted once, on the process that caused it.
    pub fn write_bytes_caused(&self) -> u64 {
        self.write_bytes
            .saturating_sub(self.wrote_back_bytes)
            .saturating_add(self.writeback_bytes)
    }

    /// Read bytes and the write bytes it caused: what ranks it in the process table.
    pub fn bytes_caused(&self) -> u64 {
        self.read_bytes + self.write_bytes_caused()
    }
}

impl ProcFigures {
    /// It made direct I/O calls or was paused by dirty throttling (it may have no request of
    /// its own: its bios released by blk-throttle from a kworker, its pages written back by
    /// the flusher).
    pub fn waited(&self) -> bool {
        self.waits.calls.latency.count > 0 || self.waits.dirty.pauses > 0
    }

    pub fn ios(&self) -> u64 {
        self.reads + self.writes + self.others
    }

    /// The one definition of an active process, what makes it worth a row (the live view's,
    /// the reports', the history's): requests, writes into the page cache, write-back it
    /// caused, sync calls, calls settled or charged in the period (a short-lived process's
    /// cost arrives after its calls, when it may have nothing else to report), time in D, or
    /// waits before its requests.
    pub fn active(&self) -> bool {
        let s = &self.sync;
        self.ios() > 0
            || self.logical_write_bytes > 0
            || self.writeback_bytes > 0
            || s.syncs > 0
            || s.small.calls + s.large.calls + s.unmeasured.calls + s.empty > 0
            || s.charged_write_bytes > 0
            || self.dstate_ns > 0
            || self.waited()
    }

    /// Adds another process's figures to these (a group of processes: a cgroup, kernel
    /// workers of one kind). Counts, bytes, histograms and time sum; maxima take the larger;
    /// the percentiles are left as they were: [`ProcFigures::sum`] reads them from the summed
    /// histograms. What is per process and does not sum (request sizes, files, parties,
    /// settled populations) stays empty.
    pub fn add(&mut self, f: &Self) {
        self.reads += f.reads;
        self.writes += f.writes;
        self.others += f.others;
        self.flushes += f.flushes;
        self.read_bytes += f.read_bytes;
        self.write_bytes += f.write_bytes;
        self.writeback_bytes += f.writeback_bytes;
        self.wrote_back_bytes += f.wrote_back_bytes;
        self.logical_write_bytes += f.logical_write_bytes;
        self.fua_writes += f.fua_writes;
        self.dstate_ns += f.dstate_ns;
        self.sequential += f.sequential;
        self.sync.syncs += f.sync.syncs;
        self.sync.time_ns += f.sync.time_ns;
        self.latency.max_ns = self.latency.max_ns.max(f.latency.max_ns);
        self.queue.max_ns = self.queue.max_ns.max(f.queue.max_ns);
        self.device.max_ns = self.device.max_ns.max(f.device.max_ns);
        self.sync.latency.max_ns = self.sync.latency.max_ns.max(f.sync.latency.max_ns);
        self.total_hist += &f.total_hist;
        self.queue_hist += &f.queue_hist;
        self.device_hist += &f.device_hist;
        self.sync.hist += &f.sync.hist;
        // The wait before the request: pauses and call time sum; the group's call
        // percentiles are its worst member's (members' percentiles do not merge).
        if f.waited() {
            let mut calls = self.waits.calls.clone();
            let mut dirty = self.waits.dirty;
            dirty.pauses += f.waits.dirty.pauses;
            dirty.pause_ns += f.waits.dirty.pause_ns;
            calls.time_ns += f.waits.calls.time_ns;
            calls.prequeue_ns += f.waits.calls.prequeue_ns;
            let (group, member) = (&mut calls.latency, &f.waits.calls.latency);
            let count = group.count + member.count;
            if count > 0 {
                group.mean_ns = u64::try_from(
                    (u128::from(group.mean_ns) * u128::from(group.count)
                        + u128::from(member.mean_ns) * u128::from(member.count))
                        / u128::from(count),
                )
                .unwrap_or(u64::MAX);
            }
            group.count = count;
            group.p50_ns = group.p50_ns.max(member.p50_ns);
            group.p99_ns = group.p99_ns.max(member.p99_ns);
            group.p999_ns = group.p999_ns.max(member.p999_ns);
            self.waits = Waits::new(calls, dirty);
        }
    }

    /// The figures of a group of processes: [`ProcFigures::add`] over the members, then the
    /// percentiles read from the summed log2 histograms (the upper bound of a slot: coarser
    /// than a process's own).
    pub fn sum<'a>(members: impl IntoIterator<Item = &'a Self>) -> Self {
        let mut sum = Self::default();
        for f in members {
            sum.add(f);
        }
        sum.latency = sum.total_hist.latency(sum.latency.max_ns);
        sum.queue = sum.queue_hist.latency(sum.queue.max_ns);
        sum.device = sum.device_hist.latency(sum.device.max_ns);
        sum.sync.latency = sum.sync.hist.latency(sum.sync.latency.max_ns);
        sum
    }

    /// Nothing happened: no request, write, call (settled or not), charge, pause or time in D.
    pub fn is_quiet(&self) -> bool {
        let s = &self.sync;
        self.ios() == 0
            && self.logical_write_bytes == 0
            && self.dstate_ns == 0
            && self.writeback_bytes == 0
            && self.wrote_back_bytes == 0
            && !self.waited()
            && s.syncs == 0
            && s.writeback_starts == 0
            && s.small.calls + s.large.calls + s.unmeasured.calls + s.dirs.calls + s.empty == 0
            && s.in_sync_write_bytes == 0
            && s.charged_write_bytes == 0
    }
    pub fn bytes(&self) -> u64 {
        self.read_bytes + self.write_bytes
    }
}

/// A process's I/O to one disk.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcDeviceRow {
    pub dev: Dev,
    pub name: String,
    pub reads: u64,
    pub writes: u64,
    pub others: u64,
    /// Cache flushes (of `others`).
    pub flushes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Write requests with the FUA flag.
    pub fua_writes: u64,
    /// The disk honours FUA itself (`queue/fua`).
    pub fua_supported: bool,
    /// Time its requests spent on the device (issue to completion), summed: its share of the
    /// disk's busy time.
    #[serde(default)]
    pub device_ns: u64,
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct ProcRow {
    /// The process (thread-group) id.
    pub tgid: u32,
    /// The comm of the thread that most recently submitted I/O.
    pub comm: String,
    /// A kernel thread (jbd2, a kworker): it works for others.
    pub kernel_thread: bool,
    /// It exited. It has rows after this one only where calls of its settle (their costs).
    pub exited: bool,
    /// The cgroup of its requests (None: not known: no request carried one).
    pub cgroup: Option<CgroupInfo>,
    pub interval: ProcFigures,
    /// Its figures since it was first seen, when that was before this interval; `None` when
    /// they are the interval's ([`ProcRow::total`] reads either). Most short-lived processes
    /// live within one interval: at thousands of them a second, a copy of the same figures in
    /// every row would be the largest part of the snapshot.
    pub since_start: Option<Box<ProcFigures>>,
    /// Per disk, for the interval; empty rows are left out.
    pub devices: Vec<ProcDeviceRow>,
    /// Its most recent sync calls, newest first.
    pub recent_syncs: Vec<SyncCallRow>,
    /// Its cgroup and the I/O limits on its way, when looked up (it had direct I/O calls or
    /// dirty pauses).
    pub io_limits: Option<Box<IoLimits>>,
    /// The write-back state at its last dirty-throttling pause.
    pub dirty_state: Option<Box<DirtyState>>,
}

impl ProcRow {
    /// Its figures since it was first seen.
    pub fn total(&self) -> &ProcFigures {
        self.since_start.as_deref().unwrap_or(&self.interval)
    }
}

/// One sync call, for the drill-down.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SyncCallRow {
    pub kind: super::SyncKind,
    pub fd: Option<i32>,
    pub file: String,
    pub latency_ns: u64,
    pub ret: i64,
    pub end_ns: u64,
    /// Not measured for io_uring syncs (`kind.payload_measured()`).
    pub window_bytes: u64,
    /// Once settled: (own device bytes, charged bytes).
    pub cost: Option<(u64, u64)>,
}

/// One closed interval.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Intervals closed so far (1 for the first).
    pub seq: u64,
    /// `CLOCK_MONOTONIC` at the end of the interval.
    pub now_ns: u64,
    pub interval_ns: u64,
    pub elapsed_ns: u64,
    pub events: EventStats,
    /// Sorted by name.
    pub disks: Vec<DiskRow>,
    /// Every process seen (recently), sorted by pid; views sort and filter.
    pub procs: Vec<ProcRow>,
    /// Active findings first (worst, newest), then fading ones.
    pub findings: Vec<super::finding::Finding>,
    /// Threads in D state now, longest blocked first.
    pub dstate: Vec<DStateTask>,
    /// The longest D episodes that ended in the last five minutes.
    pub dstate_recent: Vec<DStateEpisodeRow>,
    /// How many of the interval's finished episodes (those streamed) have a wait site.
    pub dstate_sites: SiteCounts,
    /// Host-wide load, run queue, iowait, I/O pressure and dirty memory at the interval's end.
    pub host: HostFigures,
}

/// The host's figures for the header, the first of the 60-second analysis: each is `None`
/// when its source is missing (a kernel without PSI, a recording made before they were
/// sampled), so the views show nothing rather than zeros.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct HostFigures {
    /// Load averages over 1, 5 and 15 minutes (`/proc/loadavg`).
    pub load1: Option<f64>,
    pub load5: Option<f64>,
    pub load15: Option<f64>,
    /// Runnable tasks, and tasks waiting for I/O, at the interval's end (`/proc/stat`).
    pub procs_running: Option<u32>,
    pub procs_blocked: Option<u32>,
    /// Share of all CPUs' time in the interval spent idle with I/O outstanding, percent.
    pub iowait_pct: Option<f64>,
    /// Share of the last 10 s in which some (all) non-idle tasks were stalled on I/O, percent.
    pub psi_io_some_avg10: Option<f64>,
    pub psi_io_full_avg10: Option<f64>,
    /// Page cache waiting to be written, and being written (`/proc/meminfo`).
    pub dirty_bytes: Option<u64>,
    pub writeback_bytes: Option<u64>,
}

impl HostFigures {
    /// Nothing is known (a replay of an old recording).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Finished D episodes by whether their wait site is known, and if not, why.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteCounts {
    pub episodes: u64,
    pub resolved: u64,
    pub not_sampled: u64,
    pub symbols_hidden: u64,
    pub lost: u64,
}

impl SiteCounts {
    pub fn add(&mut self, stack: &[String], no_stack: Option<NoStack>) {
        self.episodes += 1;
        match (stack.is_empty(), no_stack) {
            (false, _) => self.resolved += 1,
            (true, Some(NoStack::SymbolsHidden)) => self.symbols_hidden += 1,
            (true, Some(NoStack::Lost)) => self.lost += 1,
            (true, Some(NoStack::NotSampled) | None) => self.not_sampled += 1,
        }
    }
}

/// A thread in D state now.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DStateTask {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    /// How long it has been blocked; `None` when it was already in D when iotop-bpf started.
    pub blocked_ns: Option<u64>,
    /// Where: symbolized kernel frames, innermost first.
    pub stack: Vec<String>,
    /// Why `stack` is empty.
    pub no_stack: Option<NoStack>,
    /// Its finished episodes (over the streaming threshold) and their total, since start.
    pub episodes: u64,
    pub total_ns: u64,
}

/// A finished D episode.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DStateEpisodeRow {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    pub duration_ns: u64,
    pub ended_ns: u64,
    pub stack: Vec<String>,
    pub no_stack: Option<NoStack>,
}

/// Generic sleeping primitives: true of every wait, so they do not say where a task waits.
const GENERIC_WAITS: &[&str] = &[
    "schedule_timeout",
    "schedule_hrtimeout_range",
    "schedule_hrtimeout_range_clock",
    "schedule_preempt_disabled",
    "__wait_for_common",
    "wait_for_common",
    "wait_for_common_io",
    "wait_for_completion",
    "wait_for_completion_io",
    "wait_for_completion_killable",
    "wait_for_completion_state",
    "io_schedule_timeout",
];

/// `a <- b <- c`: the first frames that say where a task waits (generic sleeping primitives
/// skipped; `io_schedule` kept, it says the task waits for I/O). Without frames, why not:
/// `? not sampled`.
pub fn wait_site(stack: &[String], no_stack: Option<NoStack>, frames: usize) -> String {
    let telling: Vec<&str> = stack
        .iter()
        .map(String::as_str)
        .filter(|f| !GENERIC_WAITS.contains(f))
        .take(frames)
        .collect();
    match (telling.is_empty(), no_stack) {
        (false, _) => telling.join(" <- "),
        (true, Some(why)) => format!("? {}", why.words()),
        // A recording made before the reasons were kept.
        (true, None) if stack.is_empty() => "?".to_string(),
        // Only generic sleeping frames: the wait is real but says nothing more.
        (true, None) => stack.first().cloned().unwrap_or_default(),
    }
}

impl Snapshot {
    pub fn interval_secs(&self) -> f64 {
        #[expect(
            clippy::cast_precision_loss,
            reason = "an interval is far below 2^52 ns"
        )]
        let ns = self.interval_ns as f64;
        ns / 1e9
    }

    /// `count` per second over the interval.
    pub fn rate(&self, count: u64) -> f64 {
        let secs = self.interval_secs();
        #[expect(clippy::cast_precision_loss, reason = "display rates")]
        let count = count as f64;
        if secs > 0.0 { count / secs } else { 0.0 }
    }
}
