//! Which scheduler tracepoints the D-state probes use.

use anyhow::Result;
use iotop_bpf_common::dstate::SchedOffsets;

use super::tracefs::Tracefs;

pub struct SchedPlan {
    pub offsets: SchedOffsets,
    /// Use the raw `sched_switch` tracepoint (its `prev_state` argument exists from 5.18):
    /// no trace record is built on every context switch.
    pub raw_switch: bool,
    /// Classic tracepoints to attach: (program, name) in the `sched` category.
    pub classic: Vec<(&'static str, &'static str)>,
    pub degraded: Vec<String>,
}

pub fn plan(tracefs: &Tracefs, kernel: (u32, u32)) -> Result<SchedPlan> {
    let mut plan = SchedPlan {
        offsets: SchedOffsets::ABSENT,
        raw_switch: false,
        classic: Vec::new(),
        degraded: Vec::new(),
    };
    let wakeup = tracefs.format("sched", "sched_wakeup")?;
    let fields = wakeup
        .as_ref()
        .and_then(|f| Some((f.field("pid")?.clone(), f.field("comm")?.clone())));
    let Some((pid, comm)) = fields.filter(|(pid, comm)| pid.size == 4 && comm.size == 16) else {
        plan.degraded
            .push("no usable sched:sched_wakeup tracepoint: the D-state pane is off".to_string());
        return Ok(plan);
    };
    plan.offsets.wakeup_pid = pid.offset;
    plan.offsets.wakeup_comm = comm.offset;
    plan.classic.push(("dstate_wakeup", "sched_wakeup"));
    if kernel >= (5, 18) {
        plan.raw_switch = true;
        return Ok(plan);
    }
    let switch = tracefs.format("sched", "sched_switch")?;
    match switch
        .as_ref()
        .and_then(|f| f.field("prev_state"))
        .filter(|f| matches!(f.size, 4 | 8))
    {
        Some(state) => {
            plan.offsets.prev_state = state.offset;
            plan.offsets.prev_state_size = state.size;
            plan.classic.push(("dstate_switch", "sched_switch"));
        }
        None => {
            plan.classic.clear();
            plan.degraded.push(
                "no usable sched:sched_switch tracepoint: the D-state pane is off".to_string(),
            );
        }
    }
    Ok(plan)
}
