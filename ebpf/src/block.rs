//! Block request lifecycle: created -> issued -> completed.

use aya_ebpf::{
    Global,
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, generated},
    macros::{map, tracepoint},
    maps::{PerCpuArray, PerCpuHashMap},
    programs::TracePointContext,
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_BLOCK_IO,
    block::{
        BlockIoRecord, FLAG_IN_SYNC, FLAG_INSERTED, FLAG_READAHEAD, InFlightKey, OP_COUNT,
        ORIGIN_ISSUE, ORIGIN_START,
    },
    hist::{SLOTS, compress_ns, expand_ns, log2_slot},
    maps::{
        COUNTER_COMPLETE_WITHOUT_START, COUNTER_ISSUE_WITHOUT_START, COUNTER_READ_FAILED,
        DiskAggregate,
    },
    rwbs::{self, RWBS_READ_LEN},
    tracepoint::FieldOffsets,
};

use crate::{
    blame::Blame,
    emit::{self, bump, submit},
    fields::{
        COMPLETE_FIELDS, FRONTMERGE_FIELDS, ISSUE_FIELDS, RQ_MERGE_FIELDS, START_FIELDS, Window,
    },
    inflight::{self, Completion},
    sync::in_sync,
    verifier::index,
};

#[map]
static DISK_AGGREGATES: PerCpuHashMap<u32, DiskAggregate> =
    PerCpuHashMap::with_max_entries(1_024, 0);

/// One zeroed [`DiskAggregate`]: the initial value for a new disk (too big for the stack).
#[map]
static ZERO_AGGREGATE: PerCpuArray<DiskAggregate> = PerCpuArray::with_max_entries(1, 0);

/// `ORIGIN_START` when the start probe sits on `block_io_start`, `ORIGIN_INSERT` on
/// `block_rq_insert`.
#[unsafe(no_mangle)]
static START_ORIGIN: Global<u8> = Global::new(ORIGIN_START);

/// Adds `delta` to this CPU's slot of `key` in a per-CPU hash of sums, creating the key if
/// absent. Created only if still absent: another CPU may have created it since the lookup,
/// and replacing it would lose what that CPU added (a per-CPU value is created zero on every
/// other CPU).
macro_rules! add_per_cpu {
    ($map:expr, $key:expr, $delta:expr) => {{
        let (key, delta): (_, u64) = ($key, $delta);
        match $map.get_ptr_mut(key) {
            // SAFETY: this CPU's slot of a per-CPU value.
            Some(total) => unsafe { *total += delta },
            None => {
                if $map
                    .insert(key, &delta, u64::from(aya_ebpf::bindings::BPF_NOEXIST))
                    .is_err()
                    && let Some(total) = $map.get_ptr_mut(key)
                {
                    // SAFETY: as above.
                    unsafe { *total += delta };
                }
            }
        }
    }};
}
pub(crate) use add_per_cpu;

#[inline(always)]
fn key(record: &Window, offsets: &FieldOffsets) -> Result<InFlightKey, ()> {
    Ok(InFlightKey {
        dev: record.u32(offsets.dev)?,
        _pad: 0,
        sector: record.u64(offsets.sector)?,
    })
}

/// The record window and the request key, or `None` (counted) when unreadable.
#[inline(always)]
fn read_key(ctx: &TracePointContext, offsets: &FieldOffsets) -> Option<(Window, InFlightKey)> {
    let record = Window::read(ctx);
    match record.and_then(|record| Ok((key(&record, offsets)?, record))) {
        Ok((key, record)) => Some((record, key)),
        Err(()) => {
            bump(COUNTER_READ_FAILED);
            None
        }
    }
}

/// Records in the slot claimed for `key` that the current task created the request at
/// `now`. Written in place, the command straight from the kernel: building the value on the
/// stack and copying it cost more than the rest of the probe.
#[inline(always)]
pub fn created_by_current_task(key: &InFlightKey, now: u64, origin: u8) {
    let Some(slot) = inflight::claim(key) else {
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    // Data a sync call writes itself is the sync's cost, not background write-back.
    let in_sync = in_sync(pid_tgid as u32);
    // SAFETY: a valid map value (see `inflight` on concurrent access).
    unsafe {
        let value = slot.value;
        (*value).created_ns = now;
        (*value).issued_ns = 0;
        (*value).tgid = (pid_tgid >> 32) as u32;
        (*value).pid = pid_tgid as u32;
        (*value).remaining_bytes = 0;
        (*value).origin = origin;
        (*value).flags = if in_sync { FLAG_IN_SYNC } else { 0 };
        (*value).inserted_after = 0;
        let comm = &raw mut (*value).comm;
        if generated::bpf_get_current_comm(comm.cast(), COMM_LEN as u32) != 0 {
            (*comm) = [0; COMM_LEN];
        }
    }
    inflight::publish(slot, key);
}

/// A request was created from a bio, in the submitting task.
#[tracepoint]
pub fn block_start(ctx: TracePointContext) -> u32 {
    let Some((_, key)) = read_key(&ctx, &START_FIELDS.load()) else {
        return 0;
    };
    created_by_current_task(&key, unsafe { bpf_ktime_get_ns() }, START_ORIGIN.load());
    0
}

/// The driver got the request.
#[tracepoint]
pub fn block_issue(ctx: TracePointContext) -> u32 {
    let offsets = ISSUE_FIELDS.load();
    let Some((record, key)) = read_key(&ctx, &offsets) else {
        return 0;
    };
    let bytes = record.u32(offsets.bytes).unwrap_or(0);
    issued(&key, bytes);
    0
}

/// The driver got the request `key` of `bytes` bytes.
#[inline(always)]
pub fn issued(key: &InFlightKey, bytes: u32) {
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(slot) = inflight::find(key) {
        // SAFETY: the slot is only touched by this request's own probes; a requeued request
        // is issued again and its device time restarts.
        unsafe {
            (*slot.value).issued_ns = now;
            (*slot.value).remaining_bytes = bytes;
        }
        return;
    }
    // No creation seen (the flush machinery's own request, a request created before we
    // attached): attribute it to the issuing task, with no queue time.
    bump(COUNTER_ISSUE_WITHOUT_START);
    created_by_current_task(key, now, ORIGIN_ISSUE);
    if let Some(slot) = inflight::find(key) {
        // SAFETY: as above.
        unsafe {
            (*slot.value).issued_ns = now;
            (*slot.value).remaining_bytes = bytes;
        }
    }
}

/// The request `key` went into an I/O scheduler: remember when, as btt's G2I (created ->
/// inserted). Only the first insert before the issue counts (a requeue inserts it again).
#[inline(always)]
pub fn inserted(key: &InFlightKey) {
    let Some(slot) = inflight::find(key) else {
        return;
    };
    // SAFETY: the slot is only touched by this request's own probes.
    unsafe {
        let value = slot.value;
        if (*value).issued_ns != 0 || (*value).flags & FLAG_INSERTED != 0 {
            return;
        }
        let now = bpf_ktime_get_ns();
        (*value).inserted_after = compress_ns(now.saturating_sub((*value).created_ns));
        (*value).flags |= FLAG_INSERTED;
    }
}

/// A bio was merged in front of a queued request: the request now starts at the bio's
/// sector, so move its in-flight entry to the new key.
#[tracepoint]
pub fn block_frontmerge(ctx: TracePointContext) -> u32 {
    let offsets = FRONTMERGE_FIELDS.load();
    let Some((record, new_key)) = read_key(&ctx, &offsets) else {
        return 0;
    };
    let Ok(nr_sector) = record.u32(offsets.nr_sector) else {
        bump(COUNTER_READ_FAILED);
        return 0;
    };
    let old_key = InFlightKey {
        sector: new_key.sector + u64::from(nr_sector),
        ..new_key
    };
    if let Some(slot) = inflight::find(&old_key) {
        // SAFETY: copied out before the slot is freed.
        let value = unsafe { *slot.value };
        inflight::remove(slot);
        inflight::insert(&new_key, &value);
    }
    0
}

/// A queued request was merged into the one before it and freed: forget it (its bytes
/// complete as part of the surviving request, which keeps its start sector).
#[tracepoint]
pub fn block_rq_merge(ctx: TracePointContext) -> u32 {
    if let Some((_, key)) = read_key(&ctx, &RQ_MERGE_FIELDS.load())
        && let Some(slot) = inflight::find(&key)
    {
        inflight::remove(slot);
    }
    0
}

/// The request (or a part of it) completed.
#[tracepoint]
pub fn block_complete(ctx: TracePointContext) -> u32 {
    let offsets = COMPLETE_FIELDS.load();
    let Some((record, key)) = read_key(&ctx, &offsets) else {
        return 0;
    };
    let now = unsafe { bpf_ktime_get_ns() };
    let nr_sector = record.u32(offsets.nr_sector).unwrap_or(0);
    let Some(slot) = inflight::find(&key) else {
        unpaired(nr_sector);
        return 0;
    };
    let rwbs: [u8; RWBS_READ_LEN] = record.bytes8(offsets.rwbs).unwrap_or([0; RWBS_READ_LEN]);
    let completion = Completion {
        dev: key.dev,
        sector: key.sector,
        done_bytes: nr_sector << 9,
        error: record.u32(offsets.error).unwrap_or(0) as i32,
        op: rwbs::op_of(&rwbs),
        flags: 0,
        rwbs,
        blame: Blame::NONE,
    };
    // The rest of a partially completed request now starts after what completed.
    let rest_key = InFlightKey {
        sector: key.sector + u64::from(nr_sector),
        ..key
    };
    finish(slot, &completion, &rest_key, now);
    0
}

/// A completion with no request in flight. A request that went through the flush machinery
/// (PREFLUSH/FUA emulated by a post-flush) completes its data, then completes again with 0
/// bytes when the flush sequence ends: that second completion is not a lost start.
#[inline(always)]
pub fn unpaired(done: u32) {
    if done != 0 {
        bump(COUNTER_COMPLETE_WITHOUT_START);
    }
}

/// Completes the request in `slot`: per-disk aggregates and one record. A partial completion
/// (the driver completed the request in pieces) keeps the rest in flight under `rest_key`.
#[inline(always)]
pub fn finish(slot: inflight::Slot, c: &Completion, rest_key: &InFlightKey, now: u64) {
    // SAFETY: copied out; the slot is freed (and the rest moved) below.
    let started = unsafe { *slot.value };
    inflight::remove(slot);
    let mut flags = started.flags | c.flags;
    if c.done_bytes != 0 && c.done_bytes < started.remaining_bytes {
        flags |= iotop_bpf_common::block::FLAG_PARTIAL;
        let mut rest = started;
        rest.remaining_bytes = started.remaining_bytes - c.done_bytes;
        inflight::insert(rest_key, &rest);
    }
    let issued = if started.issued_ns == 0 {
        now
    } else {
        started.issued_ns
    };
    let queue_ns = issued.saturating_sub(started.created_ns);
    let device_ns = now.saturating_sub(issued);
    let bytes = if c.done_bytes != 0 {
        c.done_bytes
    } else {
        started.remaining_bytes
    };

    // Time in the scheduler: the queue time after the insert (a G2I read back a little
    // short by the compression never exceeds the queue time it is part of). Plain values,
    // not an `Option`: LLVM may load an `Option`'s payload on the path where it is `None`,
    // a read of stack bytes never written that 5.10's verifier refuses.
    let inserted = started.flags & FLAG_INSERTED != 0;
    let g2i_ns = expand_ns(started.inserted_after).min(queue_ns);
    aggregate(
        c.dev, c.op, bytes, c.error, queue_ns, device_ns, inserted, g2i_ns,
    );
    // Past the rate where user space turns aggregation on, a plain request is summed per
    // (process, disk) instead of streamed.
    if crate::aggregate::summed(
        &started,
        c,
        flags,
        bytes,
        &crate::aggregate::Times {
            queue_ns,
            device_ns,
        },
    ) {
        return;
    }

    let Some(mut record) = emit::reserve::<BlockIoRecord>() else {
        return;
    };
    let written = record.write(BlockIoRecord {
        header: emit::header::<BlockIoRecord>(RECORD_BLOCK_IO),
        created_ns: started.created_ns,
        issued_ns: issued,
        completed_ns: now,
        sector: c.sector,
        dev: c.dev,
        bytes,
        tgid: started.tgid,
        pid: started.pid,
        error: c.error,
        op: c.op,
        flags,
        origin: started.origin,
        _pad: 0,
        rwbs: c.rwbs,
        comm: started.comm,
        cgroup_id: c.blame.cgroup_id,
        dirtier_tgid: c.blame.dirtier.map_or(0, |d| d.tgid),
        file_dev: 0,
        dirtier_comm: c.blame.dirtier.map_or([0; COMM_LEN], |d| d.comm),
        file_ino: 0,
    });
    // A readahead read's file, noted by the raw completion probe: stored into the record
    // last, so no value of it lives on the paths above.
    if flags & FLAG_READAHEAD != 0
        && let Some(file) = crate::blame::readahead_file()
    {
        written.file_dev = file.dev;
        written.file_ino = file.ino;
    }
    submit(record);
}

#[inline(always)]
#[expect(
    clippy::too_many_arguments,
    reason = "inlined: the figures of one completion"
)]
fn aggregate(
    dev: u32,
    op: u8,
    bytes: u32,
    error: i32,
    queue_ns: u64,
    device_ns: u64,
    inserted: bool,
    g2i_ns: u64,
) {
    let agg = match DISK_AGGREGATES.get_ptr_mut(&dev) {
        Some(agg) => agg,
        None => {
            let Some(zero) = ZERO_AGGREGATE.get_ptr(0) else {
                return;
            };
            // SAFETY: `zero` points at a map value of the right type; insert copies it. Only
            // if absent: another CPU may have created it since the lookup, and replacing it
            // would lose what that CPU added (a per-CPU value is created zero on every CPU).
            let _ = DISK_AGGREGATES.insert(&dev, unsafe { &*zero }, u64::from(BPF_NOEXIST));
            let Some(agg) = DISK_AGGREGATES.get_ptr_mut(&dev) else {
                return;
            };
            agg
        }
    };
    let total = index::<SLOTS>(log2_slot(queue_ns + device_ns) as usize);
    let queue = index::<SLOTS>(log2_slot(queue_ns) as usize);
    let device = index::<SLOTS>(log2_slot(device_ns) as usize);
    // SAFETY: per-CPU value; indices are masked for the verifier.
    unsafe {
        if (op as usize) < OP_COUNT {
            let op = op as usize;
            (*agg).requests[op] += 1;
            (*agg).bytes[op] += u64::from(bytes);
            (*agg).latency_ns[op] += queue_ns + device_ns;
        }
        if error != 0 {
            (*agg).errors += 1;
        }
        (*agg).queue_ns += queue_ns;
        (*agg).device_ns += device_ns;
        // The masked indices are in range; unchecked, as the compiler cannot see through
        // the mask's asm and would keep a panic path the verifier refuses.
        *(*agg).total_hist.get_unchecked_mut(total) += 1;
        *(*agg).queue_hist.get_unchecked_mut(queue) += 1;
        *(*agg).device_hist.get_unchecked_mut(device) += 1;
        if inserted {
            (*agg).inserted += 1;
            (*agg).g2i_ns += g2i_ns;
            (*agg).i2d_ns += queue_ns - g2i_ns;
        }
    }
}
