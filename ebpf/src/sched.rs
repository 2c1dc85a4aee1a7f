//! D-state episodes: a thread switching out in TASK_UNINTERRUPTIBLE starts one (with its
//! kernel stack), its wakeup ends it. Episodes in progress stay in a map that user space reads
//! every interval for live durations; finished ones add to the process's D time and, above a
//! threshold, are streamed.

use aya_ebpf::{
    Global,
    bindings::{BPF_F_MMAPABLE, BPF_F_REUSE_STACKID},
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map, raw_tracepoint, tracepoint},
    maps::{Array, LruPerCpuHashMap, PerCpuArray, StackTrace},
    programs::{
        BtfTracePointContext, RawTracePointContext, TracePointContext, tracing::StackIdContext,
    },
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_DSTATE, RecordHeader,
    assoc::{Way, choose, position},
    dstate::{
        DSTATE_FRAMES, DStateRecord, EPISODE_SETS, EPISODE_WAYS, Episode, EpisodeSet, EpisodeTable,
        STACK_NOT_SAMPLED, SchedOffsets, SwitchOutcome, WAKEUP_STACK_NONE, WakeupOutcome,
        episode_set, on_switch, on_wakeup,
    },
    maps::{COUNTER_DSTATE_STALE, COUNTER_RING_DROPPED},
    tracepoint::ABSENT,
};

use crate::{
    block::{EVENTS, add_per_cpu, bump, submit},
    fields::Window,
    raw::layout,
};

#[unsafe(no_mangle)]
static SCHED_OFFSETS: Global<SchedOffsets> = Global::new(SchedOffsets::ABSENT);

#[unsafe(no_mangle)]
static DSTATE_RECORD_MIN_NS: Global<u64> = Global::new(1_000_000);

/// Mmapable so that the kernel page-aligns it (each line of a set on a cache line) and user
/// space reads it in place.
#[map]
static DSTATE_EPISODES: Array<EpisodeSet> = Array::with_max_entries(EPISODE_SETS, BPF_F_MMAPABLE);

#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(16_384, 0);

#[unsafe(no_mangle)]
static STACK_MIN_GAP_NS: Global<u64> = Global::new(10_000_000);

/// When this CPU last took a stack.
#[map]
static LAST_STACK_NS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[map]
static DSTATE_TIME: LruPerCpuHashMap<u32, u64> = LruPerCpuHashMap::with_max_entries(16_384, 0);

/// The episode table over [`DSTATE_EPISODES`]: a 4-way set-associative array by thread id.
/// A thread's episodes are written by its own switch-out and its wakeup, which the scheduler
/// orders, and by user space only to clear a stale one (a compare-and-swap on `start_ns`).
pub struct Episodes;

impl Episodes {
    /// The slot of `pid` (whether or not an episode is in it).
    #[inline(always)]
    fn find(pid: u32) -> Option<*mut Episode> {
        let set = DSTATE_EPISODES.get_ptr_mut(episode_set(pid))?;
        // SAFETY: a valid map value, `way < EPISODE_WAYS`.
        let way = position::<EPISODE_WAYS>(|way| unsafe { (*set).tids[way] } == pid)?;
        Some(unsafe { &raw mut (*set).lines[way].episode })
    }

    /// The slot to store an episode of `pid` in: its own, else one never used, else one
    /// whose episode ended, else the set's first (its episode dropped: counted as stale).
    #[inline(always)]
    fn claim(pid: u32) -> Option<*mut Episode> {
        let set = DSTATE_EPISODES.get_ptr_mut(episode_set(pid))?;
        // SAFETY (the three closures): a valid map value, `way < EPISODE_WAYS`.
        let way = choose::<EPISODE_WAYS>(
            |way| unsafe { (*set).tids[way] } == pid,
            |way| unsafe { (*set).tids[way] } == 0,
            |way| unsafe { (*set).lines[way].episode.start_ns } == 0,
        );
        let index = way.index::<EPISODE_WAYS>();
        // SAFETY: as above.
        unsafe {
            if let Way::Own(_) = way {
                return Some(&raw mut (*set).lines[index].episode);
            }
            if let Way::Evicted(_) = way {
                // The first way's episode is dropped unfinished.
                bump(COUNTER_DSTATE_STALE);
            }
            // The id is written before the episode, and only the new thread's own wakeup
            // looks for it, after this.
            (*set).lines[index].episode.start_ns = 0;
            (*set).tids[index] = pid;
            Some(&raw mut (*set).lines[index].episode)
        }
    }
}

/// Writes `episode` into a free slot, `start_ns` last: user space reads the slots in place
/// and takes an episode only if `start_ns` reads the same before and after its copy.
#[inline(always)]
fn write(slot: *mut Episode, episode: &Episode) {
    // SAFETY: a valid map value.
    unsafe {
        *slot = Episode {
            start_ns: 0,
            ..*episode
        };
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        core::ptr::write_volatile(&raw mut (*slot).start_ns, episode.start_ns);
    }
}

impl EpisodeTable for Episodes {
    #[inline(always)]
    fn get(&self, pid: u32) -> Option<Episode> {
        let slot = Self::find(pid)?;
        // SAFETY: copied out at once.
        let episode = unsafe { *slot };
        (episode.start_ns != 0).then_some(episode)
    }
    #[inline(always)]
    fn put_new(&self, pid: u32, episode: &Episode) -> bool {
        let Some(slot) = Self::claim(pid) else {
            return false;
        };
        // SAFETY: a valid map value.
        if unsafe { (*slot).start_ns } != 0 {
            return false;
        }
        write(slot, episode);
        true
    }
    #[inline(always)]
    fn put(&self, pid: u32, episode: &Episode) {
        if let Some(slot) = Self::claim(pid) {
            // SAFETY: a valid map value. Zeroed first: a reader never takes the old start
            // with the new fields (see `write`).
            unsafe { core::ptr::write_volatile(&raw mut (*slot).start_ns, 0) };
            write(slot, episode);
        }
    }
    #[inline(always)]
    fn remove(&self, pid: u32) {
        if let Some(slot) = Self::find(pid) {
            // SAFETY: a valid map value. User space clears only an episode whose thread left
            // D over a second ago, which this thread's wakeup no longer races.
            unsafe { (*slot).start_ns = 0 };
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

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next[,
/// unsigned int prev_state])`: no trace record is built. Where the state is no argument
/// (before 5.18), it is read from `prev`, which still holds the state it sleeps in.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn dstate_switch_raw(ctx: RawTracePointContext) -> i32 {
    crate::verifier::inject(&ctx, iotop_bpf_common::raw::FAULT_REJECT_DSTATE);
    // A preempted task stays runnable whatever its state says: no sleep, and no wakeup
    // would end it.
    let preempt: u64 = ctx.arg(0);
    if preempt & 1 != 0 {
        return 0;
    }
    let state_arg = layout!(switch_state_arg);
    let prev_state = if state_arg != ABSENT {
        crate::raw::arg(&ctx, state_arg) & 0xffff_ffff
    } else {
        let prev: u64 = ctx.arg(1);
        let at = layout!(task_state);
        let state = if layout!(task_state_size) == 4 {
            crate::file::read::<u32>(prev, at).map(u64::from)
        } else {
            crate::file::read::<u64>(prev, at)
        };
        let Ok(state) = state else { return 0 };
        state
    };
    switched_out(&ctx, prev_state);
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
        WakeupOutcome::Finished { episode, end_ns } => finished(&episode, end_ns, NoWakeupStack),
        WakeupOutcome::Stale => bump(COUNTER_DSTATE_STALE),
        WakeupOutcome::NoEpisode => {}
    }
    0
}

/// How a finished episode's record gets its stack: taken by the kernel into the record's
/// `ips` (returning the bytes taken or a negative errno), or none at all.
pub trait WakeupStack {
    fn take(self, ips: *mut [u64; DSTATE_FRAMES]) -> i32;
}

/// The programs that cannot take the sleeper's stack (no BTF pointer to it).
pub struct NoWakeupStack;

impl WakeupStack for NoWakeupStack {
    #[inline(always)]
    fn take(self, _ips: *mut [u64; DSTATE_FRAMES]) -> i32 {
        WAKEUP_STACK_NONE
    }
}

/// The woken task itself, as the BTF tracepoint passes it: it still sleeps at its wait site
/// (the wakeup runs under its runqueue's lock, before it can run), so its stack is where it
/// waited.
struct SleeperStack(*mut aya_ebpf::bindings::task_struct);

impl WakeupStack for SleeperStack {
    #[inline(always)]
    fn take(self, ips: *mut [u64; DSTATE_FRAMES]) -> i32 {
        // SAFETY: a trusted task pointer from the tracepoint; `ips` is reserved ring memory
        // of exactly this size.
        let taken = unsafe {
            aya_ebpf::helpers::generated::bpf_get_task_stack(
                self.0,
                ips.cast(),
                core::mem::size_of::<[u64; DSTATE_FRAMES]>() as u32,
                0,
            )
        };
        taken as i32
    }
}

#[inline(always)]
pub fn finished(episode: &Episode, end_ns: u64, stack: impl WakeupStack) {
    let duration = end_ns - episode.start_ns;
    add_per_cpu!(DSTATE_TIME, &episode.tgid, duration);
    if duration < DSTATE_RECORD_MIN_NS.load() {
        return;
    }
    let Some(mut slot) = EVENTS.reserve::<DStateRecord>(0) else {
        bump(COUNTER_RING_DROPPED);
        return;
    };
    let record = slot.as_mut_ptr();
    // SAFETY: reserved ring memory for one record, written field by field (the 192 bytes
    // of frames never pass through the 512-byte BPF stack).
    unsafe {
        (*record).header = RecordHeader {
            kind: RECORD_DSTATE,
            size: core::mem::size_of::<DStateRecord>() as u16,
            _reserved: 0,
        };
        (*record).end_ns = end_ns;
        (*record).episode = *episode;
        (*record)._pad = 0;
        (*record).stack_bytes = stack.take(&raw mut (*record).ips);
    }
    submit(slot);
}

/// `sched_wakeup(struct task_struct *p)` with BTF: the raw tracepoint's logic
/// (`raw_dstate_wakeup`), plus the sleeper's stack for every episode long enough to stream.
#[btf_tracepoint(function = "sched_wakeup")]
pub fn dstate_wakeup_btf(ctx: BtfTracePointContext) -> i32 {
    crate::verifier::inject(&ctx, iotop_bpf_common::raw::FAULT_REJECT_WAIT_SITES);
    let task: *mut aya_ebpf::bindings::task_struct = ctx.arg(0);
    crate::raw::wakeup(task as u64, SleeperStack(task));
    0
}
