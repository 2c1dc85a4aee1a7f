//! Process exits: one small record when a thread group dies, so user space forgets the
//! process soon after (instead of keeping tens of thousands of short-lived ones).

use aya_ebpf::{
    Global,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
};
use iotop_bpf_common::{
    RECORD_EXIT, RecordHeader,
    maps::COUNTER_RING_DROPPED,
    process::{ExitOffsets, ExitRecord},
    tracepoint::ABSENT,
};

use crate::{
    block::{EVENTS, bump, submit},
    fields::Window,
};

#[unsafe(no_mangle)]
static EXIT_OFFSETS: Global<ExitOffsets> = Global::new(ExitOffsets::ABSENT);

/// `sched:sched_process_exit`, in the exiting thread.
#[tracepoint]
pub fn process_exit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
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
    if !group_dead {
        return 0;
    }
    let Some(mut slot) = EVENTS.reserve::<ExitRecord>(0) else {
        bump(COUNTER_RING_DROPPED);
        return 0;
    };
    slot.write(ExitRecord {
        header: RecordHeader {
            kind: RECORD_EXIT,
            size: core::mem::size_of::<ExitRecord>() as u16,
            _reserved: 0,
        },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        tgid,
        _pad: 0,
    });
    submit(slot);
    0
}
