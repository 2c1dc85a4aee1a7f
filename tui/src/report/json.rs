//! One JSON object per interval: the stable scripting interface (ARCHITECTURE.md describes
//! the contract; the golden snapshot in `json/snapshots/` pins it). `pid` is always the process
//! (thread group), `tid` a thread.
//! Field names here are public: add fields, never rename or remove them.

use iotop_bpf_common::hist::slot_upper_us;
use serde::Serialize;

use crate::model::{
    CallLatency, DiskRow, HostFigures, Latency, Log2Hist, NoStack, Party, ProcRow, Snapshot,
    SyncPopulation,
    findings::{Evidence, Finding},
};

mod process;
pub use process::*;

#[derive(Serialize)]
pub struct Interval<'a> {
    pub ts: String,
    pub interval_s: f64,
    pub events: Events,
    /// Host-wide load, run queue, iowait, I/O pressure and dirty memory (each null when
    /// unknown).
    pub host: Host,
    pub disks: Vec<Disk<'a>>,
    pub processes: Vec<Process<'a>>,
    /// Threads in D state at the end of the interval, longest blocked first (at most
    /// [`MAX_FINDINGS`]).
    pub dstate: Vec<DState<'a>>,
    /// Threads in D left out of `dstate`.
    #[serde(skip_serializing_if = "is_zero")]
    pub dstate_omitted: u64,
    /// The longest D episodes that ended in the last five minutes.
    pub dstate_recent: Vec<DStateEpisode<'a>>,
    pub dstate_sites: Sites,
    /// The processes beyond `processes` (at most `--procs` of them, most relevant first:
    /// those with a finding, then the busiest), summed; absent when none was left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes_others: Option<super::Others>,
    /// Active findings of this interval, worst first (at most [`MAX_FINDINGS`]).
    pub findings: Vec<FindingJson<'a>>,
    /// Active findings left out beyond [`MAX_FINDINGS`].
    #[serde(skip_serializing_if = "is_zero")]
    pub findings_omitted: u64,
    /// What is degraded in this run, one line each (a probe the kernel refused, a missing
    /// capability); absent when nothing is.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub degraded: &'a [String],
    #[serde(flatten)]
    pub recording: Recording,
}

/// The recording's state when it is not as it should be; both fields absent while it
/// records every event (or without --record).
#[derive(Serialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    /// `stopped at <time>, <reason>`: a write failed (a full disk); the reports go on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording: Option<String>,
    /// Events left out of the recording so far, while the disk fell behind.
    #[serde(skip_serializing_if = "is_zero")]
    pub recording_dropped: u64,
}

#[derive(Serialize)]
pub struct FindingJson<'a> {
    pub kind: &'static str,
    pub severity: &'static str,
    pub pid: Option<u32>,
    pub comm: &'a str,
    pub dev: Option<String>,
    /// The main file involved, where known (a path, or `inode N`).
    pub file: Option<&'a str>,
    /// Every file involved, the main one first.
    pub files: &'a [String],
    pub summary: &'a str,
    pub evidence: serde_json::Map<String, serde_json::Value>,
    pub why: &'a str,
    pub hint: &'a str,
    /// Seconds the pattern has been seen for.
    pub active_s: f64,
}

impl<'a> From<&'a Finding> for FindingJson<'a> {
    fn from(f: &'a Finding) -> Self {
        let evidence = f
            .evidence
            .iter()
            .map(|(key, value)| {
                let value = match value {
                    Evidence::Count(n) => serde_json::Value::from(*n),
                    Evidence::Ratio(x) => serde_json::Value::from(*x),
                    Evidence::Text(t) => serde_json::Value::from(t.as_str()),
                };
                ((*key).to_string(), value)
            })
            .collect();
        #[expect(clippy::cast_precision_loss, reason = "seconds for display")]
        let active_s =
            (f.last_seen_ns.saturating_sub(f.first_seen_ns) as f64 / 1e9 * 10.0).round() / 10.0;
        Self {
            kind: f.kind.name(),
            severity: f.severity.name(),
            pid: f.tgid,
            comm: &f.comm,
            dev: f.dev.map(|d| d.to_string()),
            file: f.file(),
            files: &f.files,
            summary: &f.summary,
            evidence,
            why: &f.why,
            hint: &f.fix,
            active_s,
        }
    }
}

#[derive(Serialize)]
pub struct WrittenFor<'a> {
    pub pid: u32,
    pub comm: &'a str,
    pub bytes: u64,
    /// `journal` (commits and flushes charged to its sync calls) or `write-back` (its dirty
    /// pages, written by a flusher).
    pub why: &'static str,
}

#[derive(Serialize)]
pub struct DState<'a> {
    /// The process (tgid).
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a str,
    /// How long it has been blocked; for a thread already in D when iotop-bpf started, at
    /// least this long (`since_start` is then true).
    pub blocked_ms: u64,
    pub since_start: bool,
    /// Where it waits: kernel frames, innermost first.
    pub stack: &'a [String],
    /// Why `stack` is empty: `not_sampled`, `symbols_hidden` or `stack_lost`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_missing: Option<&'static str>,
}

#[derive(Serialize)]
pub struct DStateEpisode<'a> {
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a str,
    pub duration_ms: u64,
    /// Seconds since it ended.
    pub ended_s_ago: u64,
    pub stack: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_missing: Option<&'static str>,
}

/// The interval's finished D episodes (those of 1 ms or more) by whether their wait site is
/// known, and if not, why.
#[derive(Serialize)]
pub struct Sites {
    pub episodes: u64,
    pub resolved: u64,
    pub not_sampled: u64,
    pub symbols_hidden: u64,
    pub stack_lost: u64,
}

/// The JSON name of why a stack is missing.
fn missing(stack: &[String], no_stack: Option<NoStack>) -> Option<&'static str> {
    if !stack.is_empty() {
        return None;
    }
    no_stack.map(|why| match why {
        NoStack::NotSampled => "not_sampled",
        NoStack::SymbolsHidden => "symbols_hidden",
        NoStack::Lost => "stack_lost",
    })
}

#[derive(Serialize)]
pub struct Events {
    pub received: u64,
    pub dropped: u64,
    pub bad: u64,
    pub unpaired_total: u64,
    /// Records the probes produced (received + dropped, once every one was read).
    pub produced: u64,
    /// BPF time per completed block request, all probes together (null before measured).
    pub bpf_ns_per_io: Option<u64>,
    /// BPF time of all probes, percent of one CPU (null before measured).
    pub bpf_cpu_pct: Option<f64>,
    /// Runs of all probes in this interval (null where the kernel kept no statistics for
    /// the whole of it).
    pub bpf_runs: Option<u64>,
    /// "live" (measured in this interval), "sampled" (kernel.bpf_stats_enabled is 0, so
    /// iotop-bpf measures one interval in 10; this figure is from an earlier one), or
    /// "off" (no figure yet).
    pub bpf_stats: &'static str,
    /// CPU used by iotop-bpf itself, percent of one core (null when not measured).
    pub cpu_pct: Option<f64>,
    /// Direct I/O call latency (`processes[].call_latency_us`, `prequeue_ms`) is being
    /// measured: on demand, by default while a cgroup I/O control is configured on the host
    /// (`IOTOP_BPF_CALL_LATENCY=auto|on|off`). False: those figures are 0, not measured.
    pub call_latency: bool,
    /// `streaming` (a record per request) or `aggregating` (past a measured rate, plain
    /// requests are summed per process and disk in the kernel; `IOTOP_BPF_AGGREGATE_ABOVE`).
    pub mode: &'static str,
    /// Requests summed in the kernel in this interval, and those streamed as the counted
    /// sample (one in 64 of the requests that could be summed).
    pub aggregated: u64,
    pub sampled: u64,
}

/// The first figures of the 60-second analysis, at the end of the interval. Null: the source
/// is missing (no PSI in this kernel) or was not recorded (an older recording).
#[derive(Serialize)]
pub struct Host {
    /// Load averages over 1, 5 and 15 minutes (`/proc/loadavg`).
    pub load1: Option<f64>,
    pub load5: Option<f64>,
    pub load15: Option<f64>,
    /// Runnable tasks, and tasks waiting for I/O (`/proc/stat`), at the interval's end.
    pub procs_running: Option<u32>,
    pub procs_blocked: Option<u32>,
    /// Share of all CPUs' time in the interval spent idle with I/O outstanding, percent.
    pub iowait_pct: Option<f64>,
    /// `/proc/pressure/io` ten-second averages, percent.
    pub psi_io_some_avg10: Option<f64>,
    pub psi_io_full_avg10: Option<f64>,
    /// `/proc/meminfo` Dirty and Writeback.
    pub dirty_bytes: Option<u64>,
    pub writeback_bytes: Option<u64>,
}

impl From<&HostFigures> for Host {
    fn from(h: &HostFigures) -> Self {
        Self {
            load1: h.load1,
            load5: h.load5,
            load15: h.load15,
            procs_running: h.procs_running,
            procs_blocked: h.procs_blocked,
            iowait_pct: h.iowait_pct.map(round2),
            psi_io_some_avg10: h.psi_io_some_avg10,
            psi_io_full_avg10: h.psi_io_full_avg10,
            dirty_bytes: h.dirty_bytes,
            writeback_bytes: h.writeback_bytes,
        }
    }
}

#[derive(Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl From<&Latency> for Percentiles {
    fn from(l: &Latency) -> Self {
        Self {
            p50: l.p50_ns / 1000,
            p99: l.p99_ns / 1000,
            p999: l.p999_ns / 1000,
            max: l.max_ns / 1000,
        }
    }
}

#[derive(Serialize)]
pub struct Bucket {
    pub le: u64,
    pub count: u64,
}

/// Buckets up to the last non-empty one (all of them empty -> none).
fn buckets(hist: &Log2Hist) -> Vec<Bucket> {
    let last = hist
        .slots
        .iter()
        .rposition(|&n| n != 0)
        .map_or(0, |i| i + 1);
    hist.slots[..last]
        .iter()
        .enumerate()
        .map(|(slot, &count)| Bucket {
            le: slot_upper_us(u32::try_from(slot).unwrap_or(u32::MAX)),
            count,
        })
        .collect()
}

#[derive(Serialize)]
pub struct Disk<'a> {
    pub name: &'a str,
    pub dev: String,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub discards: u64,
    /// Requests of other kinds (write-zeroes, secure erase, zone ops).
    pub others: u64,
    pub discard_bytes: u64,
    pub errors: u64,
    pub util_pct: f64,
    pub aqu_sz: f64,
    pub r_await_us: u64,
    pub w_await_us: u64,
    pub latency_us: Percentiles,
    pub queue_us: Percentiles,
    pub device_us: Percentiles,
    pub histogram_us: Vec<Bucket>,
    pub queue_histogram_us: Vec<Bucket>,
    pub device_histogram_us: Vec<Bucket>,
    /// Requests merged into others before issue (iostat's rrqm, wrqm).
    pub read_merges: u64,
    pub write_merges: u64,
    /// The queue time of requests that went through an I/O scheduler, split as btt does;
    /// null when none did (no scheduler, or a kernel without the split).
    pub scheduler: Option<Scheduler>,
    /// The disk honours FUA writes itself (sysfs `queue/fua`); otherwise the block layer
    /// drops the flag and follows each such write with a cache flush.
    pub fua: bool,
}

/// btt's G2I (created -> inserted into the scheduler: plugged) and I2D (inserted ->
/// issued: in the scheduler).
#[derive(Serialize)]
pub struct Scheduler {
    /// `mq-deadline`, `bfq`, `kyber`.
    pub name: String,
    /// Requests timed through it (the split is switched on when a disk with a scheduler is
    /// seen busy: a burst's first requests, until one completes and is read, are not).
    pub requests: u64,
    pub g2i_avg_us: f64,
    pub i2d_avg_us: f64,
}

impl<'a> From<&'a DiskRow> for Disk<'a> {
    fn from(d: &'a DiskRow) -> Self {
        let f = &d.interval;
        Self {
            name: &d.name,
            dev: d.dev.to_string(),
            reads: f.reads,
            writes: f.writes,
            read_bytes: f.read_bytes,
            write_bytes: f.write_bytes,
            flushes: f.flushes,
            discards: f.discards,
            others: f.others,
            discard_bytes: f.discard_bytes,
            errors: f.errors,
            util_pct: round2(f.util_pct),
            aqu_sz: round2(f.queue_size),
            r_await_us: f.read_await_ns / 1000,
            w_await_us: f.write_await_ns / 1000,
            latency_us: (&f.latency).into(),
            queue_us: (&f.queue).into(),
            device_us: (&f.device).into(),
            histogram_us: buckets(&f.total_hist),
            queue_histogram_us: buckets(&f.queue_hist),
            device_histogram_us: buckets(&f.device_hist),
            read_merges: f.read_merges,
            write_merges: f.write_merges,
            scheduler: d
                .scheduler
                .clone()
                .zip(f.scheduler_split_ns())
                .map(|(name, (g2i, i2d))| Scheduler {
                    name,
                    requests: f.inserted,
                    g2i_avg_us: us_2(g2i),
                    i2d_avg_us: us_2(i2d),
                }),
            fua: d.geometry.fua,
        }
    }
}

/// Nanoseconds as microseconds with two decimals (G2I is often below a microsecond).
#[expect(clippy::cast_precision_loss, reason = "display")]
fn us_2(ns: u64) -> f64 {
    round2(ns as f64 / 1000.0)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Findings (and threads in D) listed per line at most: worst first, the rest counted.
pub const MAX_FINDINGS: usize = 50;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What bounds one line: the processes listed (the rest summed) and the pids asked for.
#[derive(Clone, Copy, Debug)]
pub struct Bounds<'a> {
    pub pids: &'a [u32],
    pub max_procs: usize,
}

impl Default for Bounds<'_> {
    fn default() -> Self {
        Self {
            pids: &[],
            max_procs: usize::MAX,
        }
    }
}

/// The JSON object of one interval.
pub fn interval<'a>(
    snap: &'a Snapshot,
    ts: String,
    bounds: Bounds<'_>,
    degraded: &'a [String],
) -> Interval<'a> {
    let (procs, others) = super::listed_procs(snap, bounds.pids, bounds.max_procs);
    let active = snap.findings.iter().filter(|f| f.active).count();
    Interval {
        ts,
        interval_s: (snap.interval_secs() * 1000.0).round() / 1000.0,
        events: Events {
            received: snap.events.received,
            dropped: snap.events.dropped,
            bad: snap.events.bad,
            unpaired_total: snap.events.unpaired_total,
            produced: snap.events.produced,
            bpf_ns_per_io: snap.events.bpf_ns_per_io,
            bpf_cpu_pct: snap.events.bpf_cpu_pct.map(round2),
            bpf_runs: snap.events.bpf_runs,
            bpf_stats: match (snap.events.bpf_cpu_pct, snap.events.bpf_sampled) {
                (None, _) => "off",
                (Some(_), true) => "sampled",
                (Some(_), false) => "live",
            },
            cpu_pct: snap.events.cpu_pct.map(round2),
            call_latency: snap.events.call_latency_on,
            mode: if snap.events.aggregating {
                "aggregating"
            } else {
                "streaming"
            },
            aggregated: snap.events.aggregated,
            sampled: snap.events.sampled,
        },
        host: (&snap.host).into(),
        // Every disk seen since start, idle ones with zeros, so scripts see a stable list.
        disks: snap.disks.iter().map(Disk::from).collect(),
        processes: procs.into_iter().map(Process::from).collect(),
        processes_others: others,
        dstate_omitted: snap.dstate.len().saturating_sub(MAX_FINDINGS) as u64,
        dstate: snap
            .dstate
            .iter()
            .take(MAX_FINDINGS)
            .map(|d| DState {
                pid: d.tgid,
                tid: d.tid,
                comm: &d.comm,
                blocked_ms: d.blocked_ns.unwrap_or(snap.elapsed_ns) / 1_000_000,
                since_start: d.blocked_ns.is_none(),
                stack: &d.stack,
                stack_missing: missing(&d.stack, d.no_stack),
            })
            .collect(),
        dstate_recent: snap
            .dstate_recent
            .iter()
            .map(|e| DStateEpisode {
                pid: e.tgid,
                tid: e.tid,
                comm: &e.comm,
                duration_ms: e.duration_ns / 1_000_000,
                ended_s_ago: snap.now_ns.saturating_sub(e.ended_ns) / 1_000_000_000,
                stack: &e.stack,
                stack_missing: missing(&e.stack, e.no_stack),
            })
            .collect(),
        dstate_sites: Sites {
            episodes: snap.dstate_sites.episodes,
            resolved: snap.dstate_sites.resolved,
            not_sampled: snap.dstate_sites.not_sampled,
            symbols_hidden: snap.dstate_sites.symbols_hidden,
            stack_lost: snap.dstate_sites.lost,
        },
        findings: snap
            .findings
            .iter()
            .filter(|f| f.active)
            .take(MAX_FINDINGS)
            .map(FindingJson::from)
            .collect(),
        findings_omitted: active.saturating_sub(MAX_FINDINGS) as u64,
        degraded,
        recording: Recording::default(),
    }
}

/// One NDJSON line (no trailing newline); names keep their exact characters, escaped
/// (`crate::names::json_line`).
pub fn to_line(
    snap: &Snapshot,
    ts: String,
    bounds: Bounds<'_>,
    degraded: &[String],
    recording: &Recording,
) -> String {
    let mut line = interval(snap, ts, bounds, degraded);
    line.recording = recording.clone();
    crate::names::json_line(&line).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

#[cfg(test)]
mod tests;
