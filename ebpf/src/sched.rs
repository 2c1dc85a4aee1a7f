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

mod classic;
mod stacks;
mod table;

use aya_ebpf::{
    EbpfContext, Global,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_DSTATE,
    dstate::{
        CLOCK_KTIME, CLOCK_RQ, DStateOffsets, DStateRecord, Episode, EpisodeEnd, STACK_NOT_SAMPLED,
        episode_end, is_dstate,
    },
    maps::{COUNTER_DSTATE_STALE, COUNTER_DSTATE_UNQUEUED},
    raw::{FAULT_REJECT_DSTATE, FAULT_REJECT_WAIT_SITES},
    tracepoint::ABSENT,
};

use self::{
    stacks::{NoWakeupStack, SleeperStack, WakeupStack, sampled_stack},
    table::Episodes,
};
use crate::emit::{self, bump, submit};

/// Set by the loader (a plain static, not a `Global`: a probe reads the fields it needs, not
/// a copy of the whole).
#[unsafe(no_mangle)]
pub(crate) static DSTATE_OFFSETS: DStateOffsets = DStateOffsets::ABSENT;

/// One field of [`DSTATE_OFFSETS`], as the loader set it (a volatile read: the compiler must
/// not fold in the value compiled here; the verifier knows it, from the frozen `.rodata`).
macro_rules! offset {
    ($field:ident) => {
        // SAFETY: a read of a static's field.
        unsafe { core::ptr::read_volatile(&raw const $crate::sched::DSTATE_OFFSETS.$field) }
    };
}
use offset;

#[unsafe(no_mangle)]
static DSTATE_RECORD_MIN_NS: Global<u64> = Global::new(1_000_000);

/// How a program reads a task and the objects it points to.
pub(super) trait Kernel: Copy {
    fn u32(self, base: u64, offset: u32) -> u32;
    fn u64(self, base: u64, offset: u32) -> u64;
    /// The command of `task`, the current task (the one switching out).
    fn comm(self, task: u64) -> [u8; COMM_LEN];
    /// (pid, tgid) of `task`, the current task.
    fn ids(self, task: u64) -> (u32, u32);
}

/// Loads through the pointers a `tp_btf` program is given ([`crate::direct`]).
#[derive(Clone, Copy)]
pub(super) struct Direct;

impl Kernel for Direct {
    #[inline(always)]
    fn u32(self, base: u64, offset: u32) -> u32 {
        crate::direct::load_u32(base, offset)
    }
    #[inline(always)]
    fn u64(self, base: u64, offset: u32) -> u64 {
        crate::direct::load_u64(base, offset)
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
fn switched_out(k: impl Kernel, prev: u64, stack_id: impl FnOnce(u64) -> i32) {
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
        (*slot).stack_id = stack_id(now);
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
        // Threads still in D get their stacks from the task iterator.
        switched_out(Direct, prev as u64, |_| STACK_NOT_SAMPLED);
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
        switched_out(Probed, prev, |now| sampled_stack(&ctx, now));
    }
    switched_in(Probed, next, NoWakeupStack);
    0
}

/// A finished episode's record, if it is long enough to stream.
#[inline(always)]
pub(super) fn streamed(episode: &Episode, end_ns: u64, stack: impl WakeupStack) {
    if end_ns - episode.start_ns < DSTATE_RECORD_MIN_NS.load() {
        return;
    }
    let Some(mut slot) = emit::reserve::<DStateRecord>() else {
        return;
    };
    let record = slot.as_mut_ptr();
    // SAFETY: reserved ring memory for one record, written field by field (the 192 bytes
    // of frames never pass through the 512-byte BPF stack).
    unsafe {
        (*record).header = emit::header::<DStateRecord>(RECORD_DSTATE);
        (*record).end_ns = end_ns;
        (*record).episode = *episode;
        (*record)._pad = 0;
        (*record).stack_bytes = stack.take(&raw mut (*record).ips);
    }
    submit(slot);
}
