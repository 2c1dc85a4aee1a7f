//! D-state episodes. Where BTF describes the scheduler, one `sched_switch` program sees both
//! ends of an episode: the switch out of a thread in TASK_UNINTERRUPTIBLE starts it, and the
//! thread's next switch in ends it at the time its wakeup queued it (the scheduler's
//! `sched_info.last_queued`, still set when the tracepoint fires). No wakeup program runs:
//! most wakeups are of threads that slept in S, and each would be a program run. Without BTF
//! the classic `sched_switch` and `sched_wakeup` tracepoints pair the ends instead.
//!
//! Episodes in progress stay in a table user space reads in place every interval; finished
//! ones add to the process's D time and, above a threshold, are streamed with the sleeper's
//! stack (taken at its switch in, before it runs: still its wait site).

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{BPF_F_MMAPABLE, BPF_F_REUSE_STACKID},
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
    },
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
        CLOCK_KTIME, CLOCK_RQ, DSTATE_FRAMES, DStateOffsets, DStateRecord, EPISODE_SETS,
        EPISODE_WAYS, Episode, EpisodeEnd, EpisodeSet, EpisodeTable, STACK_NOT_SAMPLED,
        SchedOffsets, SwitchOutcome, WAKEUP_STACK_NONE, WakeupOutcome, episode_end, episode_set,
        is_dstate, on_switch, on_wakeup, owner_word, total_ns, total_word,
    },
    maps::{COUNTER_DSTATE_STALE, COUNTER_DSTATE_UNQUEUED, COUNTER_RING_DROPPED},
    raw::{FAULT_REJECT_DSTATE, FAULT_REJECT_WAIT_SITES},
    tracepoint::ABSENT,
};

use crate::{
    block::{EVENTS, add_per_cpu, bump, submit},
    fields::Window,
};

#[unsafe(no_mangle)]
static SCHED_OFFSETS: Global<SchedOffsets> = Global::new(SchedOffsets::ABSENT);

/// Set by the loader (a plain static, not a `Global`: a probe reads the fields it needs, not
/// a copy of the whole).
#[unsafe(no_mangle)]
static DSTATE_OFFSETS: DStateOffsets = DStateOffsets::ABSENT;

/// One field of [`DSTATE_OFFSETS`], as the loader set it (a volatile read: the compiler must
/// not fold in the value compiled here; the verifier knows it, from the frozen `.rodata`).
macro_rules! offset {
    ($field:ident) => {
        // SAFETY: a read of a static's field.
        unsafe { core::ptr::read_volatile(&raw const DSTATE_OFFSETS.$field) }
    };
}

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
/// A thread's episodes are written by its own switch out and its switch in (or wakeup), which
/// the scheduler orders, and by user space only to clear a stale one (a compare-and-swap on
/// `start_ns`).
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
    /// whose episode ended, else the set's first (its episode dropped: counted as stale);
    /// and whether it was already `pid`'s.
    #[inline(always)]
    fn claim(pid: u32) -> Option<(*mut Episode, bool)> {
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
            let slot = &raw mut (*set).lines[index].episode;
            if let Way::Own(_) = way {
                return Some((slot, true));
            }
            if let Way::Evicted(_) = way {
                // The first way's episode is dropped unfinished.
                bump(COUNTER_DSTATE_STALE);
            }
            // The id is written before the episode, and only the new thread's own switch in
            // (or wakeup) looks for it, after this.
            core::ptr::write_volatile(&raw mut (*slot).start_ns, 0);
            (*set).tids[index] = pid;
            Some((slot, false))
        }
    }

    /// Gives `slot` to the thread `task` of process `tgid` (0: to nobody, its thread
    /// exited): the D time of the thread it held goes to that thread's process in
    /// [`DSTATE_TIME`], and the slot starts a new generation, so that user space never adds
    /// one thread's time to another's process.
    ///
    /// # Safety
    /// `slot` is a valid map value.
    #[inline(always)]
    unsafe fn hand_over(slot: *mut Episode, tgid: u32, task: u64) {
        // SAFETY: the caller's.
        let (owner, total) = unsafe { ((*slot).owner, total_ns((*slot).total)) };
        if total != 0 {
            add_per_cpu!(DSTATE_TIME, &(owner as u32), total);
        }
        // SAFETY: the caller's.
        unsafe {
            let generation = ((owner >> 32) as u32).wrapping_add(1);
            core::ptr::write_volatile(&raw mut (*slot).total, total_word(generation, 0));
            core::ptr::write_volatile(&raw mut (*slot).owner, owner_word(tgid, generation));
            (*slot).task = task;
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
        let Some((slot, _)) = Self::claim(pid) else {
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
        if let Some((slot, _)) = Self::claim(pid) {
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
            // D over a second ago, which this thread's own probes no longer race.
            unsafe { (*slot).start_ns = 0 };
        }
    }
}

/// How a program reads a task and the objects it points to.
trait Kernel: Copy {
    fn u32(self, base: u64, offset: u32) -> u32;
    fn u64(self, base: u64, offset: u32) -> u64;
    /// The command of `task`, the current task (the one switching out).
    fn comm(self, task: u64) -> [u8; COMM_LEN];
    /// (pid, tgid) of `task`, the current task.
    fn ids(self, task: u64) -> (u32, u32);
}

/// Loads through the pointers a `tp_btf` program is given, which the verifier checks against
/// BTF (a faulting load reads 0): one instruction each.
#[derive(Clone, Copy)]
struct Direct;

impl Kernel for Direct {
    #[inline(always)]
    fn u32(self, base: u64, offset: u32) -> u32 {
        // SAFETY: a BTF-checked load from a kernel object (BPF_PROBE_MEM).
        unsafe { core::ptr::read_volatile((base + u64::from(offset)) as *const u32) }
    }
    #[inline(always)]
    fn u64(self, base: u64, offset: u32) -> u64 {
        // SAFETY: as above.
        unsafe { core::ptr::read_volatile((base + u64::from(offset)) as *const u64) }
    }
    #[inline(always)]
    fn comm(self, task: u64) -> [u8; COMM_LEN] {
        let at = offset!(task_comm);
        let (head, tail) = (self.u64(task, at), self.u64(task, at + 8));
        let mut comm = [0u8; COMM_LEN];
        comm[..8].copy_from_slice(&head.to_ne_bytes());
        comm[8..].copy_from_slice(&tail.to_ne_bytes());
        comm
    }
    #[inline(always)]
    fn ids(self, task: u64) -> (u32, u32) {
        (
            self.u32(task, offset!(task_pid)),
            self.u32(task, offset!(task_tgid)),
        )
    }
}

/// `bpf_probe_read_kernel`, for the raw tracepoint's plain pointers.
#[derive(Clone, Copy)]
struct Probed;

impl Kernel for Probed {
    #[inline(always)]
    fn u32(self, base: u64, offset: u32) -> u32 {
        crate::file::read::<u32>(base, offset).unwrap_or(0)
    }
    #[inline(always)]
    fn u64(self, base: u64, offset: u32) -> u64 {
        crate::file::read::<u64>(base, offset).unwrap_or(0)
    }
    #[inline(always)]
    fn comm(self, _task: u64) -> [u8; COMM_LEN] {
        bpf_get_current_comm().unwrap_or([0; COMM_LEN])
    }
    #[inline(always)]
    fn ids(self, _task: u64) -> (u32, u32) {
        let pid_tgid = bpf_get_current_pid_tgid();
        (pid_tgid as u32, (pid_tgid >> 32) as u32)
    }
}

/// The runqueue clock of `task`'s CPU (`task->se.cfs_rq->rq->clock`), as the scheduler last
/// updated it: at the top of `__schedule`, for the switch being traced.
#[inline(always)]
fn rq_clock(k: impl Kernel, task: u64) -> u64 {
    let cfs_rq = k.u64(task, offset!(task_cfs_rq));
    let link = offset!(cfs_rq_rq);
    if link != ABSENT {
        return k.u64(k.u64(cfs_rq, link), offset!(rq_clock));
    }
    // Without group scheduling the cfs_rq is inside its rq: no BTF pointer leads back out of
    // it, so this one is read as plain memory.
    let rq = cfs_rq.wrapping_sub(u64::from(offset!(rq_cfs)));
    let clock = rq + u64::from(offset!(rq_clock));
    // SAFETY: bpf_probe_read_kernel validates the address.
    unsafe { bpf_probe_read_kernel(clock as *const u64) }.unwrap_or(0)
}

/// `prev` switches out in D: its episode starts, in its thread's slot.
#[inline(always)]
fn switched_out<C: StackIdContext>(k: impl Kernel, ctx: &C, prev: u64) {
    let now = unsafe { bpf_ktime_get_ns() };
    let (pid, tgid) = k.ids(prev);
    let Some((slot, own)) = Episodes::claim(pid) else {
        return;
    };
    let start_clock = if offset!(clock) == CLOCK_KTIME {
        now
    } else {
        rq_clock(k, prev)
    };
    // SAFETY: a valid map value, written by this thread's own switches (and a thread taking
    // the slot over); user space reads it in place and takes an episode only if `start_ns`
    // reads the same before and after its copy.
    unsafe {
        if own && core::ptr::read_volatile(&raw const (*slot).start_ns) != 0 {
            // Its last episode never saw its switch in.
            bump(COUNTER_DSTATE_STALE);
            core::ptr::write_volatile(&raw mut (*slot).start_ns, 0);
        }
        if !own || (*slot).task != prev {
            Episodes::hand_over(slot, tgid, prev);
        }
        (*slot).pid = pid;
        (*slot).stack_id = sampled_stack(ctx, now);
        (*slot).comm = k.comm(prev);
        (*slot).start_clock = start_clock;
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        core::ptr::write_volatile(&raw mut (*slot).start_ns, now);
    }
}

/// `next` switches in: the end of its D episode, if it has one.
#[inline(always)]
fn switched_in(k: impl Kernel, next: u64, stack: impl WakeupStack) {
    // Most threads switching in did not last block in D: one load and out.
    let bit = offset!(task_load_bit);
    if bit < 32 && k.u32(next, offset!(task_load_word)) & (1 << bit) == 0 {
        return;
    }
    let Some(slot) = Episodes::find(k.u32(next, offset!(task_pid))) else {
        return;
    };
    // SAFETY: a valid map value, copied out at once.
    let episode = unsafe { *slot };
    if episode.start_ns == 0 {
        return;
    }
    // SAFETY: a valid map value; this thread's own probes are its only other writers.
    unsafe { core::ptr::write_volatile(&raw mut (*slot).start_ns, 0) };
    if episode.task != next {
        // The episode of a thread whose id this one reused: it never switched in again.
        bump(COUNTER_DSTATE_STALE);
        return;
    }
    let end = match offset!(clock) {
        CLOCK_KTIME => EpisodeEnd::Running(unsafe { bpf_ktime_get_ns() }),
        CLOCK_RQ => EpisodeEnd::Running(rq_clock(k, next)),
        _ => episode_end(
            episode.start_clock,
            k.u64(next, offset!(task_last_queued)),
            || rq_clock(k, next),
        ),
    };
    if offset!(clock) > CLOCK_RQ && matches!(end, EpisodeEnd::Running(_)) {
        bump(COUNTER_DSTATE_UNQUEUED);
    }
    let duration = end.clock().saturating_sub(episode.start_clock);
    // SAFETY: as above. One store: user space reads the word whole.
    unsafe { core::ptr::write_volatile(&raw mut (*slot).total, episode.total + duration) };
    streamed(&episode, episode.start_ns + duration, stack);
}

/// The thread `pid` (task `task`) exits: its slot's D time goes to its process now, while
/// the process is still read, not when another thread takes the slot over.
#[inline(always)]
pub fn thread_exited(pid: u32, task: u64) {
    if let Some(slot) = Episodes::find(pid)
        // SAFETY: a valid map value.
        && unsafe { (*slot).task } == task
    {
        // SAFETY: as above.
        unsafe { Episodes::hand_over(slot, 0, 0) };
    }
}

/// The state `prev` switches out in: `sched_switch`'s argument where it passes one, else the
/// task's own state, which still holds the state it sleeps in.
#[inline(always)]
fn prev_state(k: impl Kernel, ctx: &impl EbpfContext, prev: u64) -> u64 {
    let arg = offset!(switch_state_arg);
    if arg != ABSENT {
        return crate::raw::arg(ctx, arg) & 0xffff_ffff;
    }
    let at = offset!(task_state);
    if offset!(task_state_size) == 4 {
        u64::from(k.u32(prev, at))
    } else {
        k.u64(prev, at)
    }
}

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next[,
/// unsigned int prev_state])` with BTF: both ends of D episodes, and the sleeper's stack for
/// every episode long enough to stream.
#[btf_tracepoint(function = "sched_switch")]
pub fn dstate_switch_btf(ctx: BtfTracePointContext) -> i32 {
    crate::verifier::inject(&ctx, FAULT_REJECT_DSTATE);
    crate::verifier::inject(&ctx, FAULT_REJECT_WAIT_SITES);
    let preempt: u64 = ctx.arg(0);
    let prev: *mut aya_ebpf::bindings::task_struct = ctx.arg(1);
    let next: *mut aya_ebpf::bindings::task_struct = ctx.arg(2);
    // A preempted task stays runnable whatever its state says: no sleep.
    if preempt & 1 == 0 && is_dstate(prev_state(Direct, &ctx, prev as u64)) {
        switched_out(Direct, &ctx, prev as u64);
    }
    switched_in(Direct, next as u64, SleeperStack(next));
    0
}

/// The same on the plain raw tracepoint, where the kernel refuses the BTF-typed program:
/// stacks only as sampled at the switch out.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn dstate_switch_raw(ctx: RawTracePointContext) -> i32 {
    crate::verifier::inject(&ctx, FAULT_REJECT_DSTATE);
    let preempt: u64 = ctx.arg(0);
    let prev: u64 = ctx.arg(1);
    let next: u64 = ctx.arg(2);
    if preempt & 1 == 0 && is_dstate(prev_state(Probed, &ctx, prev)) {
        switched_out(Probed, &ctx, prev);
    }
    switched_in(Probed, next, NoWakeupStack);
    0
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

/// The classic tracepoint, for kernels without BTF: the switch out only.
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
    let Ok(state) = state else { return 0 };
    if !is_dstate(state) {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let now = unsafe { bpf_ktime_get_ns() };
    let episode = Episode {
        start_ns: now,
        owner: owner_word((pid_tgid >> 32) as u32, 0),
        pid: pid_tgid as u32,
        stack_id: sampled_stack(&ctx, now),
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
        task: 0,
        start_clock: now,
        total: 0,
    };
    if on_switch(&Episodes, state, &episode) == SwitchOutcome::ReplacedStale {
        bump(COUNTER_DSTATE_STALE);
    }
    0
}

/// The classic wakeup, which ends an episode where no BTF describes the scheduler.
#[tracepoint]
pub fn dstate_wakeup(ctx: TracePointContext) -> u32 {
    let offsets = SCHED_OFFSETS.load();
    // Most wakeups are of tasks sleeping in S: read the pid alone, one lookup, and out.
    if offsets.wakeup_pid == ABSENT {
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
        WakeupOutcome::Finished { episode, end_ns } => {
            add_per_cpu!(DSTATE_TIME, &episode.tgid(), end_ns - episode.start_ns);
            streamed(&episode, end_ns, NoWakeupStack);
        }
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

/// The thread switching in, as the BTF tracepoint passes it: it has not run since it was
/// woken, so its stack is still where it waited.
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

/// A finished episode's record, if it is long enough to stream.
#[inline(always)]
fn streamed(episode: &Episode, end_ns: u64, stack: impl WakeupStack) {
    if end_ns - episode.start_ns < DSTATE_RECORD_MIN_NS.load() {
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
