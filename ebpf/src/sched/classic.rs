//! The classic `sched_switch` and `sched_wakeup` tracepoints, for kernels without BTF: the
//! switch out starts an episode, the wakeup ends it.

use aya_ebpf::{
    Global,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
};
use iotop_bpf_common::{
    COMM_LEN,
    dstate::{
        Episode, SchedOffsets, SwitchOutcome, WakeupOutcome, is_dstate, on_switch, on_wakeup,
        owner_word,
    },
    maps::COUNTER_DSTATE_STALE,
    tracepoint::ABSENT,
};

use super::{
    stacks::{NoWakeupStack, sampled_stack},
    streamed,
    table::{DSTATE_TIME, Episodes},
};
use crate::{block::add_per_cpu, emit::bump, fields::Window};

#[unsafe(no_mangle)]
static SCHED_OFFSETS: Global<SchedOffsets> = Global::new(SchedOffsets::ABSENT);

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
