//! A process's state read out as its row of the snapshot when an interval closes: the
//! figures of the interval and since start, per disk, its direct I/O calls and recent syncs.

use iotop_bpf_common::block::{OP_READ, OP_WRITE};

use super::{FileNames, ProcBook, ProcPeriod};
use crate::{
    CgroupInfo, Dev,
    hist::Latency,
    snapshot::{
        CallDisk, CallFigures, CallLatency, ProcDeviceRow, ProcFigures, ProcRow, SyncCallRow, Waits,
    },
    throttle::CallHist,
};

impl ProcPeriod {
    fn call_figures(&self) -> CallFigures {
        let mut all = CallHist::default();
        let mut disks: Vec<CallDisk> = self
            .calls
            .iter()
            .map(|c| {
                all.merge(&c.hist);
                CallDisk {
                    disk: c.disk,
                    latency: CallLatency::of(&c.hist),
                    time_ns: c.hist.sum_ns,
                    request_p99_ns: c.request_p99_ns,
                    own_requests: c.own_requests,
                    prequeue_ns: c.prequeue_ns,
                }
            })
            .collect();
        disks.sort_by(|a, b| {
            b.latency
                .count
                .cmp(&a.latency.count)
                .then(a.disk.cmp(&b.disk))
        });
        CallFigures {
            latency: CallLatency::of(&all),
            time_ns: all.sum_ns,
            prequeue_ns: disks
                .iter()
                .fold(0u64, |sum, d| sum.saturating_add(d.prequeue_ns)),
            disks,
        }
    }

    /// `fua`: whether a disk honours FUA itself.
    fn figures(&self, fua: &impl Fn(Dev) -> bool, names: &FileNames) -> ProcFigures {
        let c = &self.counts;
        ProcFigures {
            reads: c.requests[OP_READ as usize],
            writes: c.requests[OP_WRITE as usize],
            others: c.others(),
            flushes: c.flushes(),
            read_bytes: c.bytes[OP_READ as usize],
            write_bytes: c.bytes[OP_WRITE as usize],
            latency: Latency::of(&self.latencies.total),
            queue: Latency::of(&self.latencies.queue),
            device: Latency::of(&self.latencies.device),
            queue_hist: self.latencies.queue.log2(),
            device_hist: self.latencies.device.log2(),
            total_hist: self.latencies.total.log2(),
            logical_write_bytes: self.logical_bytes,
            fua_writes: self
                .devices
                .iter()
                .filter(|&(&dev, _)| fua(dev))
                .map(|(_, c)| c.fua_writes)
                .sum(),
            sync: self.sync.figures(),
            dstate_ns: self.dstate_ns,
            write_sizes: self.patterns.write_sizes(),
            read_sizes: self.patterns.read_sizes(),
            sequential: self.patterns.sequential(),
            dio: self.patterns.dio_figures(),
            writeback_bytes: self.writeback.written_by.total(),
            written_back_by: self.writeback.written_by.figures(),
            wrote_back_bytes: self.writeback.wrote_for.total(),
            wrote_back_for: self.writeback.wrote_for.figures(),
            waits: Waits::new(self.call_figures(), self.dirty),
            read_demand: self.reads.figures(names),
        }
    }

    fn devices(
        &self,
        name_of: &impl Fn(Dev) -> String,
        fua: &impl Fn(Dev) -> bool,
    ) -> Vec<ProcDeviceRow> {
        self.devices
            .iter()
            .map(|(&dev, c)| ProcDeviceRow {
                dev,
                name: name_of(dev),
                reads: c.requests[OP_READ as usize],
                writes: c.requests[OP_WRITE as usize],
                others: c.others(),
                flushes: c.flushes(),
                read_bytes: c.bytes[OP_READ as usize],
                write_bytes: c.bytes[OP_WRITE as usize],
                fua_writes: c.fua_writes,
                fua_supported: fua(dev),
                device_ns: c.device_ns,
            })
            .collect()
    }
}

impl ProcBook {
    /// Closes the interval: every process's row (figures of the interval and since start),
    /// sorted by pid; the interval figures start again from zero. `fua`: whether a disk
    /// honours FUA writes itself.
    pub(crate) fn close(
        &mut self,
        name_of: &impl Fn(Dev) -> String,
        cgroup_of: &impl Fn(u64) -> Option<CgroupInfo>,
        disk_p99: &impl Fn(Dev) -> Option<u64>,
        fua: &impl Fn(Dev) -> bool,
    ) -> Vec<ProcRow> {
        let names = &self.file_names;
        let mut rows: Vec<ProcRow> = self
            .procs
            .iter_mut()
            .filter_map(|(&tgid, state)| {
                state.judge_calls(disk_p99);
                let interval = state.interval.figures(fua, names);
                if state.exit_reported && interval.is_quiet() {
                    // Waiting for its calls to settle: a row per interval for each of the
                    // thousands a second a fork-heavy host ends would be most of the snapshot.
                    state.total.merge(&state.interval);
                    state.interval = ProcPeriod::default();
                    return None;
                }
                let devices = state.interval.devices(name_of, fua);
                state.total.merge(&state.interval);
                let row = ProcRow {
                    tgid,
                    comm: state.comm.to_string(),
                    kernel_thread: state.kernel_thread,
                    exited: state.exited_ns.is_some(),
                    cgroup: cgroup_of(state.cgroup),
                    since_start: state
                        .closed_before
                        .then(|| Box::new(state.total.figures(fua, names))),
                    interval,
                    devices,
                    recent_syncs: state
                        .recent_syncs
                        .iter()
                        .rev()
                        .map(|r| SyncCallRow {
                            kind: r.call.kind,
                            fd: r.call.fd,
                            file: r.call.file.to_string(),
                            latency_ns: r.call.latency_ns(),
                            ret: r.call.ret,
                            end_ns: r.call.end_ns,
                            window_bytes: r.call.window_bytes,
                            cost: r.cost,
                        })
                        .collect(),
                    io_limits: state.io_limits.clone().map(Box::new),
                    dirty_state: state.dirty_state.clone().map(Box::new),
                };
                state.interval = ProcPeriod::default();
                state.closed_before = true;
                state.exit_reported = state.exited_ns.is_some();
                Some(row)
            })
            .collect();
        rows.sort_by_key(|row| row.tgid);
        rows
    }
}
