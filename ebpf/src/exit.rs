//! Exits: one small record when a thread group dies, so user space forgets the process soon
//! after (instead of keeping tens of thousands of short-lived ones); and every exiting
//! thread's D time handed to its process (`sched::thread_exited`).

use aya_ebpf::{
    Global,
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns},
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use iotop_bpf_common::{
    RECORD_EXIT,
    process::{ExitOffsets, ExitRecord},
    tracepoint::ABSENT,
};

use crate::{
    emit::{self, submit},
    fields::Window,
    file,
    raw::{arg, layout},
};

#[unsafe(no_mangle)]
static EXIT_OFFSETS: Global<ExitOffsets> = Global::new(ExitOffsets::ABSENT);

/// `sched:sched_process_exit`, in the exiting thread.
#[tracepoint]
pub fn process_exit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    crate::sched::thread_exited(pid_tgid as u32, unsafe { bpf_get_current_task() });
    let offsets = EXIT_OFFSETS.load();
    let group_dead = if offsets.group_dead == ABSENT {
        // Older kernels: the group leader's exit stands for the process's.
        pid_tgid as u32 == tgid
    } else {
        match Window::read(&ctx).and_then(|w| w.bytes8(offsets.group_dead)) {
            Ok(bytes) => bytes[0] != 0,
            Err(()) => return 0,
        }
    };
    if group_dead {
        exited(tgid);
    }
    0
}

/// `sched_process_exit(struct task_struct *p[, bool group_dead])`, raw: the group is dead
/// when the argument says so (6.18+), else when `p->signal->live` has dropped to 0 (the
/// exiting thread decremented it before the tracepoint).
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn raw_process_exit(ctx: RawTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    crate::sched::thread_exited(pid_tgid as u32, ctx.arg(0));
    let dead_arg = layout!(exit_group_dead_arg);
    let group_dead = if dead_arg != ABSENT {
        arg(&ctx, dead_arg) & 0xff != 0
    } else {
        let task: u64 = ctx.arg(0);
        match file::read::<u64>(task, layout!(task_signal))
            .and_then(|signal| file::read::<u32>(signal, layout!(signal_live)))
        {
            Ok(live) => live == 0,
            Err(()) => return 0,
        }
    };
    if group_dead {
        exited(tgid);
    }
    0
}

/// One exit record for process `tgid`.
#[inline(always)]
fn exited(tgid: u32) {
    let Some(mut slot) = emit::reserve::<ExitRecord>() else {
        return;
    };
    slot.write(ExitRecord {
        header: emit::header::<ExitRecord>(RECORD_EXIT),
        ts_ns: unsafe { bpf_ktime_get_ns() },
        tgid,
        _pad: 0,
    });
    submit(slot);
}
