//! The per-process part of the JSON line: a process, its devices, sync cost, direct I/O
//! and totals (moved out of `json.rs` to keep it short; the fields are the same contract).

use super::*;
use crate::model::{DioFigures, ProcDeviceRow, ProcFigures};

#[derive(Serialize)]
pub struct ProcessDevice<'a> {
    pub dev: String,
    pub name: &'a str,
    pub reads: u64,
    /// Writes that carried data.
    pub writes: u64,
    pub others: u64,
    /// Cache flushes (of `others`): flush requests and writes without data.
    pub flushes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Write requests with the FUA flag, and whether the disk honours FUA itself.
    pub fua_writes: u64,
    pub fua: bool,
}

#[derive(Serialize)]
pub struct Process<'a> {
    pub pid: u32,
    pub comm: &'a str,
    pub reads: u64,
    /// Writes that carried data.
    pub writes: u64,
    pub others: u64,
    /// Cache flushes (of `others`): flush requests and writes without data (an fsync's).
    pub flushes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// What it asked to write in write syscalls to regular files and block devices.
    pub logical_write_bytes: u64,
    /// What kernel threads (journal, write-back) wrote while its syncs waited.
    pub charged_write_bytes: u64,
    /// Device bytes per byte made durable of its typical sync call (own writes plus charged
    /// journal writes over payload, see `sync_cost`): the `AMP` column and the
    /// `write_amplification` finding's figure. 0 until a sync call with a payload settled.
    pub write_amplification: f64,
    pub ios: u64,
    pub io_latency_us: Percentiles,
    pub queue_us: Percentiles,
    pub device_us: Percentiles,
    pub syncs: u64,
    /// Calls per kind: `fsync`, `fdatasync`, `sync_file_range`, `syncfs`, `sync`, `msync`,
    /// `O_DSYNC write`, `O_SYNC write` (writes the filesystem made durable before
    /// returning), `io_uring fsync`, `io_uring fdatasync`, `io_uring sync_file_range`,
    /// `io_uring O_DSYNC write` (an io_uring write on an `O_DSYNC`/`O_SYNC` file), and
    /// `sync_file_range(WRITE)`: calls that only start write-back (no wait flag), not
    /// counted in `syncs`.
    pub sync_kinds: std::collections::BTreeMap<&'static str, u64>,
    pub sync_errors: u64,
    pub sync_latency_us: Percentiles,
    /// FUA write requests (durable on their own) to disks that honour FUA.
    pub fua_writes: u64,
    /// Bytes written to the synced fds since their previous syncs (the synced payload).
    pub sync_window_bytes: u64,
    /// Bytes of write requests it created inside its own sync calls.
    pub sync_write_bytes: u64,
    /// What its settled sync calls cost, by population: calls that made less than one
    /// filesystem block durable (`small`) and the others (`large`). Left out for a process
    /// with no sync call settled in the interval (most): 25 of them are a fifth of a line.
    #[serde(skip_serializing_if = "SyncCost::is_empty")]
    pub sync_cost: SyncCost,
    /// The files it synced most, most first.
    pub sync_files: Vec<&'a str>,
    /// The cgroup of its requests: a container (`docker:4f2c8a1b9d3e`), a pod (`pod:<uid>`),
    /// a systemd unit, else its path; null when no request carried one.
    pub cgroup: Option<&'a str>,
    /// The cgroup's path below its hierarchy's root (v1 `blkio` when mounted, else v2).
    pub cgroup_path: Option<&'a str>,
    /// A kernel thread (it writes for others), and whether the process exited.
    pub kernel_thread: bool,
    pub exited: bool,
    /// Who wrote for it: journal bytes charged to its sync calls (e.g. jbd2/loop0-8), and
    /// the flushers that wrote its dirty pages back.
    pub charged_from: Vec<WrittenFor<'a>>,
    /// For kernel threads: whom they wrote for (journal commits, write-back).
    pub written_for: Vec<WrittenFor<'a>>,
    /// Bytes of its dirty pages flushers wrote in this interval (not in `write_bytes`, which
    /// counts the requests it created itself).
    pub writeback_bytes: u64,
    pub dstate_ms: u64,
    pub devices: Vec<ProcessDevice<'a>>,
    /// Since iotop-bpf started (or first saw the process).
    pub totals: ProcessTotals,
    /// Request sizes in this interval, byte-exact (512-byte requests are not folded into a
    /// 0-1 KiB bucket).
    pub write_sizes: Vec<SizeCount>,
    pub read_sizes: Vec<SizeCount>,
    /// Its reads against what it asked for: readahead reads (per file) and, from /proc, its
    /// major faults and read-call bytes (what `read_amplification` judges). Left out for a
    /// process without readahead reads whose asks were not sampled (most).
    #[serde(skip_serializing_if = "ReadDemand::is_empty")]
    pub read_demand: ReadDemand<'a>,
    /// Its direct I/O calls that are not 4 KiB-aligned, and the zeroing they cause.
    /// Left out for a process without any (most): 25 of them are most of a line.
    #[serde(skip_serializing_if = "DirectIo::is_empty")]
    pub direct_io: DirectIo<'a>,
    /// Its direct I/O calls (synchronous, libaio, io_uring; on iomap filesystems such as ext4
    /// and XFS, not raw block devices) completed in the interval.
    pub direct_io_calls: u64,
    /// Their latency from entry (`iomap_dio_rw_begin`) to completion (`iomap_dio_complete`),
    /// us, from a quarter-octave histogram kept in the kernel (within ~12%). Compare with
    /// `io_latency_us`: blk-throttle, iocost and a full request queue hold a call before its
    /// request exists, which request latency never shows.
    pub call_latency_us: CallPercentiles,
    /// Call time not spent in a request ("throttle/pre-queue" time), ms: the sum over its
    /// calls of max(0, call latency - the p99 of its requests in the interval, or of its
    /// disk's requests when it created fewer than 20). A lower bound of the wait before (or
    /// after) the request.
    pub prequeue_ms: u64,
    /// `prequeue_ms` as a share of the time spent in its calls (0 to 1).
    pub prequeue_share: f64,
    /// Time its writers were paused by dirty throttling (`balance_dirty_pages`), ms, summed
    /// over threads, and how many pauses.
    pub dirty_pause_ms: u64,
    pub dirty_pauses: u64,
    /// The cgroup(s) of the process whose I/O limits `io_limits` lists (`blkio:/path` for
    /// cgroup v1, the v2 path, from /proc/PID/cgroup), once looked up (when it had
    /// direct I/O calls or dirty pauses); null before.
    pub limits_cgroup: Option<&'a str>,
    /// The blk-throttle limits on its way (its cgroup and ancestors).
    pub io_limits: Vec<IoLimitJson<'a>>,
}

#[derive(Serialize)]
pub struct CallPercentiles {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub mean: u64,
}

impl From<&CallLatency> for CallPercentiles {
    fn from(l: &CallLatency) -> Self {
        Self {
            p50: l.p50_ns / 1000,
            p99: l.p99_ns / 1000,
            p999: l.p999_ns / 1000,
            mean: l.mean_ns / 1000,
        }
    }
}

#[derive(Serialize)]
pub struct IoLimitJson<'a> {
    pub dev: String,
    /// `read_bps`, `write_bps`, `read_iops`, `write_iops`.
    pub kind: &'static str,
    pub value: u64,
    /// The file that sets it (`.../blkio.throttle.write_iops_device`, `.../io.max`).
    pub file: &'a str,
}

#[derive(Serialize)]
pub struct SyncCost {
    pub small: Population,
    pub large: Population,
    /// Settled calls whose payload is not measured (io_uring: its writes are not system
    /// calls): what they wrote themselves and what was charged to them; payload 0.
    pub unmeasured: Population,
    /// Settled fsyncs of directories (the new files' names); their cost is counted in
    /// `write_amplification`.
    pub directories: Population,
    /// Settled calls with nothing to make durable.
    pub empty: u64,
}

#[derive(Serialize)]
pub struct Population {
    pub calls: u64,
    pub payload_bytes: u64,
    /// Device writes of the calls' threads, with `ahead_bytes`.
    pub own_bytes: u64,
    /// Of `own_bytes`, what `sync_file_range` wrote out of the same files before the calls.
    pub ahead_bytes: u64,
    pub charged_bytes: u64,
    pub amplification: f64,
    pub fs_block_size: u32,
}

impl From<&SyncPopulation> for Population {
    fn from(p: &SyncPopulation) -> Self {
        Self {
            calls: p.calls,
            payload_bytes: p.payload_bytes,
            own_bytes: p.own_bytes,
            ahead_bytes: p.ahead_bytes,
            charged_bytes: p.charged_bytes,
            amplification: round2(p.amplification().unwrap_or(0.0)),
            fs_block_size: p.fs_block_size,
        }
    }
}

/// Direct I/O calls the probe streamed: those not aligned to the largest filesystem or
/// physical block size in use.
#[derive(Serialize)]
pub struct DirectIo<'a> {
    pub streamed_calls: u64,
    /// Calls not aligned to the device's physical block size.
    pub unaligned_calls: u64,
    /// Every streamed call (the tracepoint cannot tell synchronous reads from writes).
    pub writes: u64,
    /// Calls the kernel zeroes around: past EOF (predicted from the geometry) and inside
    /// the file into unwritten extents (confirmed by the zeroing requests seen).
    pub zeroing_writes: u64,
    pub zeroed_tail_bytes: u64,
    pub zeroed_head_bytes: u64,
    /// Zeroed inside the file, into unwritten (preallocated) extents.
    pub zeroed_inside_bytes: u64,
    pub tail_pads: Vec<SizeCount>,
    /// Write requests exactly a predicted pad, ending on a filesystem block boundary.
    pub pad_requests: u64,
    /// Write requests finishing a filesystem block they started inside (pads, merged or not).
    pub block_finishing_requests: u64,
    pub fs_block_size: u32,
    pub physical_block_size: u32,
    pub file: Option<&'a str>,
}

impl SyncCost {
    fn is_empty(&self) -> bool {
        self.empty == 0
            && [
                &self.small,
                &self.large,
                &self.unmeasured,
                &self.directories,
            ]
            .iter()
            .all(|p| p.calls == 0)
    }
}

impl DirectIo<'_> {
    fn is_empty(&self) -> bool {
        self.streamed_calls == 0
            && self.zeroing_writes == 0
            && self.pad_requests == 0
            && self.block_finishing_requests == 0
            && self.tail_pads.is_empty()
    }
}

#[derive(Serialize)]
pub struct SizeCount {
    pub bytes: u32,
    pub count: u64,
}

#[derive(Serialize)]
pub struct ProcessTotals {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub ios: u64,
    pub io_latency_us: Percentiles,
    pub syncs: u64,
    pub sync_latency_us: Percentiles,
    pub logical_write_bytes: u64,
    pub charged_write_bytes: u64,
    pub writeback_bytes: u64,
    pub dstate_ms: u64,
    pub direct_io_calls: u64,
    pub call_latency_us: CallPercentiles,
    pub prequeue_ms: u64,
    pub dirty_pause_ms: u64,
}

impl<'a> From<&'a ProcRow> for Process<'a> {
    fn from(p: &'a ProcRow) -> Self {
        let f = &p.interval;
        Self {
            pid: p.tgid,
            comm: &p.comm,
            reads: f.reads,
            writes: f.writes,
            others: f.others,
            flushes: f.flushes,
            read_bytes: f.read_bytes,
            write_bytes: f.write_bytes,
            logical_write_bytes: f.logical_write_bytes,
            charged_write_bytes: f.sync.charged_write_bytes,
            write_amplification: round2(f.sync.amplification().unwrap_or(0.0)),
            sync_cost: SyncCost {
                small: (&f.sync.small).into(),
                large: (&f.sync.large).into(),
                unmeasured: (&f.sync.unmeasured).into(),
                directories: (&f.sync.dirs).into(),
                empty: f.sync.empty,
            },
            sync_files: f.sync.files.iter().map(|(p, _)| p.as_str()).collect(),
            cgroup: p.cgroup.as_ref().map(|c| c.name.as_str()),
            cgroup_path: p.cgroup.as_ref().map(|c| c.path.as_str()),
            kernel_thread: p.kernel_thread,
            exited: p.exited,
            ios: f.ios(),
            io_latency_us: (&f.latency).into(),
            queue_us: (&f.queue).into(),
            device_us: (&f.device).into(),
            syncs: f.sync.syncs,
            sync_kinds: f
                .sync
                .kinds
                .iter()
                .copied()
                .chain(
                    (f.sync.writeback_starts > 0)
                        .then_some(("sync_file_range(WRITE)", f.sync.writeback_starts)),
                )
                .collect(),
            fua_writes: f.fua_writes,
            sync_errors: f.sync.errors,
            sync_latency_us: (&f.sync.latency).into(),
            sync_window_bytes: f.sync.window_bytes,
            sync_write_bytes: f.sync.in_sync_write_bytes,
            charged_from: parties(&f.sync.charged_from, "journal")
                .chain(parties(&f.written_back_by, "write-back"))
                .collect(),
            written_for: parties(&f.sync.on_behalf_of, "journal")
                .chain(parties(&f.wrote_back_for, "write-back"))
                .collect(),
            writeback_bytes: f.writeback_bytes,
            dstate_ms: f.dstate_ns / 1_000_000,
            devices: p.devices.iter().map(ProcessDevice::from).collect(),
            direct_io: (&f.dio).into(),
            read_demand: ReadDemand {
                readahead_reads: f.read_demand.readahead_requests,
                readahead_bytes: f.read_demand.readahead_bytes,
                sequential_reads: f.read_demand.sequential,
                major_faults: f
                    .read_demand
                    .asked_known
                    .then_some(f.read_demand.major_faults),
                minor_faults: f
                    .read_demand
                    .asked_known
                    .then_some(f.read_demand.minor_faults),
                read_call_bytes: f
                    .read_demand
                    .asked_known
                    .then_some(f.read_demand.read_call_bytes),
                files: f
                    .read_demand
                    .files
                    .iter()
                    .map(|(path, bytes)| ReadFile {
                        path,
                        readahead_bytes: *bytes,
                    })
                    .collect(),
            },
            write_sizes: f
                .write_sizes
                .iter()
                .map(|&(bytes, count)| SizeCount { bytes, count })
                .collect(),
            read_sizes: f
                .read_sizes
                .iter()
                .map(|&(bytes, count)| SizeCount { bytes, count })
                .collect(),
            totals: p.total().into(),
            direct_io_calls: f.waits.calls.latency.count,
            call_latency_us: (&f.waits.calls.latency).into(),
            prequeue_ms: f.waits.calls.prequeue_ns / 1_000_000,
            prequeue_share: (f.waits.calls.prequeue_share() * 1000.0).round() / 1000.0,
            dirty_pause_ms: f.waits.dirty.pause_ns / 1_000_000,
            dirty_pauses: f.waits.dirty.pauses,
            limits_cgroup: p.io_limits.as_deref().map(|l| l.cgroup.as_str()),
            io_limits: p
                .io_limits
                .as_deref()
                .map(|l| {
                    l.limits
                        .iter()
                        .map(|x| IoLimitJson {
                            dev: x.dev.to_string(),
                            kind: x.kind.name(),
                            value: x.value,
                            file: &x.file,
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// A process's reads against what it asked for.
#[derive(Serialize)]
pub struct ReadDemand<'a> {
    pub readahead_reads: u64,
    pub readahead_bytes: u64,
    /// Read requests that began where its previous one on the disk ended.
    pub sequential_reads: u64,
    /// From /proc (null: not sampled over the whole interval).
    pub major_faults: Option<u64>,
    pub minor_faults: Option<u64>,
    pub read_call_bytes: Option<u64>,
    /// Readahead bytes per file, the most read first.
    pub files: Vec<ReadFile<'a>>,
}

#[derive(Serialize)]
pub struct ReadFile<'a> {
    pub path: &'a str,
    pub readahead_bytes: u64,
}

impl ReadDemand<'_> {
    fn is_empty(&self) -> bool {
        self.readahead_reads == 0 && self.major_faults.is_none()
    }
}

impl<'a> From<&'a ProcDeviceRow> for ProcessDevice<'a> {
    fn from(d: &'a ProcDeviceRow) -> Self {
        Self {
            dev: d.dev.to_string(),
            name: &d.name,
            reads: d.reads,
            writes: d.writes,
            others: d.others,
            flushes: d.flushes,
            read_bytes: d.read_bytes,
            write_bytes: d.write_bytes,
            fua_writes: d.fua_writes,
            fua: d.fua_supported,
        }
    }
}

impl<'a> From<&'a DioFigures> for DirectIo<'a> {
    fn from(d: &'a DioFigures) -> Self {
        Self {
            streamed_calls: d.calls,
            unaligned_calls: d.unaligned_calls,
            writes: d.calls,
            zeroing_writes: d.tail_writes + d.inside_zeroing_requests,
            zeroed_tail_bytes: d.tail_bytes,
            zeroed_head_bytes: d.head_bytes,
            zeroed_inside_bytes: d.inside_zeroed_bytes,
            tail_pads: d
                .pads
                .iter()
                .map(|&(pad, count)| SizeCount {
                    bytes: u32::try_from(pad).unwrap_or(u32::MAX),
                    count,
                })
                .collect(),
            pad_requests: d.pad_requests,
            block_finishing_requests: d.block_finishing_requests,
            fs_block_size: d.fs_block_size,
            physical_block_size: d.physical_block_size,
            file: d.file.as_deref(),
        }
    }
}

impl From<&ProcFigures> for ProcessTotals {
    fn from(t: &ProcFigures) -> Self {
        Self {
            reads: t.reads,
            writes: t.writes,
            read_bytes: t.read_bytes,
            write_bytes: t.write_bytes,
            ios: t.ios(),
            io_latency_us: (&t.latency).into(),
            syncs: t.sync.syncs,
            sync_latency_us: (&t.sync.latency).into(),
            logical_write_bytes: t.logical_write_bytes,
            charged_write_bytes: t.sync.charged_write_bytes,
            writeback_bytes: t.writeback_bytes,
            dstate_ms: t.dstate_ns / 1_000_000,
            direct_io_calls: t.waits.calls.latency.count,
            call_latency_us: (&t.waits.calls.latency).into(),
            prequeue_ms: t.waits.calls.prequeue_ns / 1_000_000,
            dirty_pause_ms: t.waits.dirty.pause_ns / 1_000_000,
        }
    }
}

pub(super) fn parties<'a>(
    parties: &'a [Party],
    why: &'static str,
) -> impl Iterator<Item = WrittenFor<'a>> {
    parties.iter().map(move |p| WrittenFor {
        pid: p.tgid,
        comm: &p.comm,
        bytes: p.bytes,
        why,
    })
}
