//! Kernel stacks of D episodes: one taken from the sleeper as its episode ends; for threads
//! still in D, one per interval from a task iterator user space runs; and where neither
//! program loads, one sampled at the switch out.

use aya_ebpf::{
    Global,
    bindings::BPF_F_REUSE_STACKID,
    macros::map,
    maps::{PerCpuArray, StackTrace},
    programs::tracing::StackIdContext,
};
use iotop_bpf_common::dstate::{
    DSTATE_FRAMES, STACK_NOT_SAMPLED, StuckThread, WAKEUP_STACK_NONE, is_dstate,
};

use super::{Direct, Kernel, offset};

#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(16_384, 0);

#[unsafe(no_mangle)]
static STACK_MIN_GAP_NS: Global<u64> = Global::new(10_000_000);

/// When this CPU last took a stack.
#[map]
static LAST_STACK_NS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The current task's kernel stack, unless this CPU took one less than `STACK_MIN_GAP_NS`
/// ago. User space reads the stack of a thread still stuck from /proc instead.
#[inline(always)]
pub(super) fn sampled_stack<C: StackIdContext>(ctx: &C, now: u64) -> i32 {
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
pub(super) struct SleeperStack(pub(super) *mut aya_ebpf::bindings::task_struct);

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

/// `struct bpf_iter_meta`.
#[repr(C)]
struct IterMeta {
    seq: *mut aya_ebpf::bindings::seq_file,
    session_id: u64,
    seq_num: u64,
}

/// `struct bpf_iter__task`: the task is null once, at the end.
#[repr(C)]
struct IterTask {
    meta: *mut IterMeta,
    task: *mut aya_ebpf::bindings::task_struct,
}

/// A task iterator: user space runs it once per interval, and it writes every thread in D
/// with its stack ([`StuckThread`]). Its cost is per thread of the host per interval, not per
/// switch; the switch into D takes no stack where it loads.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn dstate_stuck(ctx: *mut core::ffi::c_void) -> i32 {
    let ctx = ctx.cast::<IterTask>();
    // SAFETY: the iterator's context, as the kernel passes it.
    let (meta, task) = unsafe { ((*ctx).meta, (*ctx).task) };
    if task.is_null() {
        return 0;
    }
    let at = offset!(task_state);
    let state = if offset!(task_state_size) == 4 {
        u64::from(Direct.u32(task as u64, at))
    } else {
        Direct.u64(task as u64, at)
    };
    if !is_dstate(state) {
        return 0;
    }
    let mut thread = StuckThread {
        tid: Direct.u32(task as u64, offset!(task_pid)),
        stack_bytes: 0,
        ips: [0; DSTATE_FRAMES],
    };
    // SAFETY: a trusted task pointer from the iterator, a buffer of exactly this size, and
    // the iterator's seq_file.
    unsafe {
        thread.stack_bytes = aya_ebpf::helpers::generated::bpf_get_task_stack(
            task,
            thread.ips.as_mut_ptr().cast(),
            core::mem::size_of::<[u64; DSTATE_FRAMES]>() as u32,
            0,
        ) as i32;
        aya_ebpf::helpers::generated::bpf_seq_write(
            (*meta).seq,
            (&raw const thread).cast(),
            core::mem::size_of::<StuckThread>() as u32,
        );
    }
    0
}
