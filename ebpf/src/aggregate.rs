//! Aggregation mode (see `iotop_bpf_common::aggregate`): a plain request is summed per
//! (process, disk) on this CPU instead of streamed, past the rate at which user space turns
//! the mode on. The completion probe asks [`summed`] before it reserves a ring record.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{Array, PerCpuArray, PerCpuHashMap},
};
use iotop_bpf_common::{
    aggregate::{
        MAX_ENTRIES, ProcDiskAggregate, ProcDiskKey, SAMPLE_EVERY, SIZE_SLOTS_MASKED, TOTAL_SLOTS,
        aggregable, size_slot,
    },
    block::{InFlight, OP_READ},
    hist::{SLOTS, log2_slot},
    maps::{COUNTER_AGGREGATE_FULL, COUNTER_AGGREGATED, COUNTER_SAMPLED},
    throttle::call_slot,
};

use crate::{
    emit::{COUNTERS, bump},
    inflight::Completion,
    sync::any_sync_active,
    verifier::index,
};

/// 0: stream every request; else aggregate, summing requests aligned to this many bytes.
#[map]
static AGGREGATE_ALIGN: Array<u64> = Array::with_max_entries(1, 0);

/// Sized by the loader from the possible CPUs (`aggregate::entries_for`).
#[map]
static PROC_DISK_AGGREGATES: PerCpuHashMap<ProcDiskKey, ProcDiskAggregate> =
    PerCpuHashMap::with_max_entries(MAX_ENTRIES, 0);

/// One zeroed value: the initial one of a new key (too big for the stack).
#[map]
static ZERO_PROC_DISK: PerCpuArray<ProcDiskAggregate> = PerCpuArray::with_max_entries(1, 0);

/// The times of one completed request.
pub struct Times {
    pub queue_ns: u64,
    pub device_ns: u64,
}

/// Sums the completed request in this CPU's entry of its (process, disk) and returns true, or
/// returns false when it must be streamed: streaming mode, a request a detector needs on its
/// own, the counted sample, or a full map.
// Inlined, with as few branches as it can have: the verifier walks it once per path of the
// completion probe that leads to it (~150 ms more before the first frame when it had all its
// checks). As a function of its own (a BPF-to-BPF call) 5.10's verifier walks it again for
// each caller state, past its million-instruction budget.
#[inline(always)]
pub fn summed(started: &InFlight, c: &Completion, flags: u8, bytes: u32, times: &Times) -> bool {
    let align = match AGGREGATE_ALIGN.get(0) {
        Some(&align) if align != 0 => align,
        _ => return false,
    };
    let writing_while_syncing = c.op != OP_READ && any_sync_active();
    if !aggregable(
        c.op,
        flags,
        bytes,
        c.error,
        c.blame.dirtier.is_some(),
        writing_while_syncing,
        align,
    ) {
        return false;
    }
    // One in SAMPLE_EVERY of the requests that could be summed is streamed, counted.
    let (Some(aggregated), Some(sampled)) = (
        COUNTERS.get_ptr_mut(COUNTER_AGGREGATED),
        COUNTERS.get_ptr_mut(COUNTER_SAMPLED),
    ) else {
        return false;
    };
    // SAFETY: this CPU's counters; programs do not nest on one CPU.
    unsafe {
        if (*aggregated + *sampled) % SAMPLE_EVERY == SAMPLE_EVERY - 1 {
            *sampled += 1;
            return false;
        }
    }
    let key = ProcDiskKey {
        tgid: started.tgid,
        dev: c.dev,
    };
    let value = match PROC_DISK_AGGREGATES.get_ptr_mut(&key) {
        Some(value) => value,
        None => {
            let Some(zero) = ZERO_PROC_DISK.get_ptr(0) else {
                return false;
            };
            // SAFETY: `zero` points at a map value of the right type; insert copies it. Only
            // if absent: another CPU may have created it since the lookup.
            let _ = PROC_DISK_AGGREGATES.insert(&key, unsafe { &*zero }, u64::from(BPF_NOEXIST));
            let Some(value) = PROC_DISK_AGGREGATES.get_ptr_mut(&key) else {
                // Full: streamed instead, so nothing is lost.
                bump(COUNTER_AGGREGATE_FULL);
                return false;
            };
            value
        }
    };
    let op = index::<2>(usize::from(c.op != OP_READ));
    let total = index::<TOTAL_SLOTS>(call_slot(times.queue_ns + times.device_ns) as usize);
    let queue = index::<SLOTS>(log2_slot(times.queue_ns) as usize);
    let device = index::<SLOTS>(log2_slot(times.device_ns) as usize);
    let size = index::<SIZE_SLOTS_MASKED>(size_slot(bytes));
    // SAFETY: this CPU's slot of a per-CPU value; a program does not nest on its own CPU. The
    // indices are masked for the verifier and checked against the arrays' lengths (the
    // masks are powers of two at least as large).
    unsafe {
        // Unchecked: the compiler cannot see through the mask's asm and would keep a panic
        // path, which the verifier refuses.
        *(*value).requests.get_unchecked_mut(op) += 1;
        *(*value).bytes.get_unchecked_mut(op) += u64::from(bytes);
        (*value).queue_ns += times.queue_ns;
        (*value).device_ns += times.device_ns;
        (*value).sequential += u64::from(c.sector == (*value).next_sector);
        (*value).next_sector = c.sector + u64::from(bytes >> 9);
        // The arrays are as long as the masks: no bounds check, no branch.
        *(*value).total_hist.get_unchecked_mut(total) += 1;
        *(*value).queue_hist.get_unchecked_mut(queue) += 1;
        *(*value).device_hist.get_unchecked_mut(device) += 1;
        *(*value)
            .size_hist
            .get_unchecked_mut(op)
            .get_unchecked_mut(size) += 1;
        // Every CPU writes its copy (a branch costs the verifier more than 16 bytes cost).
        (*value).comm = started.comm;
        *aggregated += 1;
    }
    true
}
