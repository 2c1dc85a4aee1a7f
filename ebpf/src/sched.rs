//! D-state episodes: a thread switching out in TASK_UNINTERRUPTIBLE starts one (with its
//! kernel stack), its wakeup ends it. Episodes in progress stay in a map that user space reads
//! every interval for live durations; finished ones add to the process's D time and, above a
//! threshold, are streamed.

use aya_ebpf::{
    Global,
    bindings::{BPF_ANY, BPF_F_REUSE_STACKID, BPF_NOEXIST},
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, LruPerCpuHashMap, PerCpuArray, StackTrace},
    programs::{RawTracePointContext, TracePointContext, tracing::StackIdContext},
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_DSTATE, RecordHeader,
    dstate::{
        DStateRecord, Episode, EpisodeTable, OPEN_REMOVED, OPEN_REMOVED_BY_USER, OPEN_STORED,
        STACK_NOT_SAMPLED, SchedOffsets, SwitchOutcome, WakeupOutcome, on_switch, on_wakeup,
    },
    maps::{COUNTER_DSTATE_STALE, COUNTER_RING_DROPPED},
};

use crate::{
    block::{EVENTS, add_per_cpu, bump, submit},
    fields::Window,
    sync::atomic_add,
};

#[unsafe(no_mangle)]
static SCHED_OFFSETS: Global<SchedOffsets> = Global::new(SchedOffsets::ABSENT);

#[unsafe(no_mangle)]
static DSTATE_RECORD_MIN_NS: Global<u64> = Global::new(1_000_000);

#[map]
static DSTATE_EPISODES: HashMap<u32, Episode> = HashMap::with_max_entries(16_384, 0);

#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(16_384, 0);

#[unsafe(no_mangle)]
static STACK_MIN_GAP_NS: Global<u64> = Global::new(1_000_000);

/// When this CPU last took a stack.
#[map]
static LAST_STACK_NS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Episodes stored / removed by the probes / removed by user space (`OPEN_*`).
#[map]
static DSTATE_OPEN: Array<u64> = Array::with_max_entries(3, 0);

#[inline(always)]
fn count(index: u32) {
    if let Some(n) = DSTATE_OPEN.get_ptr_mut(index) {
        // SAFETY: a valid, aligned map value.
        unsafe { atomic_add(n, 1) };
    }
}

/// Whether any thread may be in a D episode: false only when every stored episode was
/// removed, by the probes or by user space (see `OPEN_STORED`). An inlined array load, so
/// a wakeup of a host with no thread in D costs no pid read and no hash lookup.
#[inline(always)]
pub fn any_episode() -> bool {
    let n = |index| DSTATE_OPEN.get(index).copied().unwrap_or(0);
    n(OPEN_STORED) != n(OPEN_REMOVED).wrapping_add(n(OPEN_REMOVED_BY_USER))
}

#[map]
static DSTATE_TIME: LruPerCpuHashMap<u32, u64> = LruPerCpuHashMap::with_max_entries(16_384, 0);

/// The episode table over the BPF hash map.
pub struct Episodes;

impl EpisodeTable for Episodes {
    #[inline(always)]
    fn get(&self, pid: u32) -> Option<Episode> {
        // SAFETY: copied out at once.
        DSTATE_EPISODES.get_ptr(&pid).map(|e| unsafe { *e })
    }
    #[inline(always)]
    fn put_new(&self, pid: u32, episode: &Episode) -> bool {
        let stored = DSTATE_EPISODES
            .insert(&pid, episode, u64::from(BPF_NOEXIST))
            .is_ok();
        if stored {
            count(OPEN_STORED);
        }
        stored
    }
    #[inline(always)]
    fn put(&self, pid: u32, episode: &Episode) {
        let _ = DSTATE_EPISODES.insert(&pid, episode, u64::from(BPF_ANY));
    }
    #[inline(always)]
    fn remove(&self, pid: u32) {
        // Counted only if this call deleted it (user space may have, in between).
        if DSTATE_EPISODES.remove(&pid).is_ok() {
            count(OPEN_REMOVED);
        }
    }
}

/// The current task's kernel stack, unless this CPU took one less than `STACK_MIN_GAP_NS`
/// ago. User space reads the stack of a thread still stuck from /proc instead.
#[inline(always)]
fn sampled_stack<C: StackIdContext>(ctx: &C, now: u64) -> i32 {
    let Some(last) = LAST_STACK_NS.get_ptr_mut(0) else {
        return STACK_NOT_SAMPLED;
    };
    // SAFETY: this CPU's slot.
    unsafe {
        if now.wrapping_sub(*last) < STACK_MIN_GAP_NS.load() {
            return STACK_NOT_SAMPLED;
        }
        *last = now;
    }
    ctx.get_stackid(&STACKS, u64::from(BPF_F_REUSE_STACKID))
        .map_or(-1, |id| id as i32)
}

/// sched_switch runs in the task that is switching out (`prev` is current).
#[inline(always)]
fn switched_out<C: StackIdContext>(ctx: &C, prev_state: u64) {
    if !iotop_bpf_common::dstate::is_dstate(prev_state) {
        return; // the common case, decided before any helper call
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let now = unsafe { bpf_ktime_get_ns() };
    let episode = Episode {
        start_ns: now,
        tgid: (pid_tgid >> 32) as u32,
        pid: pid_tgid as u32,
        stack_id: sampled_stack(ctx, now),
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    };
    if on_switch(&Episodes, prev_state, &episode) == SwitchOutcome::ReplacedStale {
        bump(COUNTER_DSTATE_STALE);
    }
}

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)` (5.18+): no trace record is built, the state is an argument.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn dstate_switch_raw(ctx: RawTracePointContext) -> i32 {
    let prev_state: u64 = ctx.arg(3);
    switched_out(&ctx, prev_state & 0xffff_ffff);
    0
}

/// The classic tracepoint, for kernels whose raw sched_switch has no prev_state argument.
#[tracepoint]
pub fn dstate_switch(ctx: TracePointContext) -> u32 {
    let offsets = SCHED_OFFSETS.load();
    let Ok(record) = Window::read(&ctx) else {
        return 0;
    };
    let state = if offsets.prev_state_size == 4 {
        record.u32(offsets.prev_state).map(u64::from)
    } else {
        record.u64(offsets.prev_state)
    };
    if let Ok(state) = state {
        switched_out(&ctx, state);
    }
    0
}

#[tracepoint]
pub fn dstate_wakeup(ctx: TracePointContext) -> u32 {
    if !any_episode() {
        return 0;
    }
    let offsets = SCHED_OFFSETS.load();
    // Most wakeups are of tasks sleeping in S: read the pid alone, one lookup, and out.
    if offsets.wakeup_pid == iotop_bpf_common::tracepoint::ABSENT {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel validates the address; the offset comes from tracefs.
    let Ok(pid) = (unsafe { ctx.read_at::<u32>(offsets.wakeup_pid as usize) }) else {
        return 0;
    };
    let comm = || {
        let mut comm = [0u8; COMM_LEN];
        if let Ok(record) = Window::read(&ctx)
            && let (Ok(head), Ok(tail)) = (
                record.bytes8(offsets.wakeup_comm),
                record.bytes8(offsets.wakeup_comm + 8),
            )
        {
            comm[..8].copy_from_slice(&head);
            comm[8..].copy_from_slice(&tail);
        }
        comm
    };
    match on_wakeup(&Episodes, pid, comm, || unsafe { bpf_ktime_get_ns() }) {
        WakeupOutcome::Finished { episode, end_ns } => finished(&episode, end_ns),
        WakeupOutcome::Stale => bump(COUNTER_DSTATE_STALE),
        WakeupOutcome::NoEpisode => {}
    }
    0
}

#[inline(always)]
pub fn finished(episode: &Episode, end_ns: u64) {
    let duration = end_ns - episode.start_ns;
    add_per_cpu!(DSTATE_TIME, &episode.tgid, duration);
    if duration < DSTATE_RECORD_MIN_NS.load() {
        return;
    }
    let Some(mut slot) = EVENTS.reserve::<DStateRecord>(0) else {
        bump(COUNTER_RING_DROPPED);
        return;
    };
    slot.write(DStateRecord {
        header: RecordHeader {
            kind: RECORD_DSTATE,
            size: core::mem::size_of::<DStateRecord>() as u16,
            _reserved: 0,
        },
        end_ns,
        episode: *episode,
    });
    submit(slot);
}
