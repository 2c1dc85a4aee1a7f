//! Kernel stacks of D episodes: one taken from the sleeper as its episode ends, or one
//! sampled at the switch out.

use aya_ebpf::{
    Global,
    bindings::BPF_F_REUSE_STACKID,
    macros::map,
    maps::{PerCpuArray, StackTrace},
    programs::tracing::StackIdContext,
};
use iotop_bpf_common::dstate::{DSTATE_FRAMES, STACK_NOT_SAMPLED, WAKEUP_STACK_NONE};

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
