//! The scheduler probes: D-state episodes (`sched_switch` alone where BTF describes the
//! scheduler, else `sched_switch` to `sched_wakeup`) and process exits.

use iotop_bpf_common::{
    dstate::{CLOCK_KTIME, CLOCK_RQ, CLOCK_RQ_QUEUED, DStateOffsets},
    tracepoint::ABSENT,
};

use super::{KernelFacts, Part, Plan, Step, arg_is, offsets::off};

pub fn plan(k: &KernelFacts, raw: bool, classic: &Result<(), String>, plan: &mut Plan) {
    let raw_dstate = if raw {
        raw_dstate(k, plan)
    } else {
        Err(String::new())
    };
    if let Err(why) = raw_dstate {
        match classic {
            Ok(()) => classic_dstate(k, plan),
            Err(no_classic) => plan.notes.push(format!(
                "{}: {}{no_classic}",
                Part::DState.loss(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!("{why}; ")
                }
            )),
        }
    }
    let raw_exit = if raw {
        raw_exit(k, plan)
    } else {
        Err(String::new())
    };
    if let Err(why) = raw_exit {
        match classic {
            Ok(()) => classic_exit(k, plan),
            Err(no_classic) => plan.notes.push(format!(
                "{}: {}{no_classic}",
                Part::Exits.loss(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!("{why}; ")
                }
            )),
        }
    }
}

fn raw_dstate(k: &KernelFacts, plan: &mut Plan) -> Result<(), String> {
    let switch = k
        .raw_tracepoint("sched_switch")
        .ok_or("no raw sched_switch tracepoint")?;
    if !arg_is(k, "sched_switch", 1, "task_struct") || !arg_is(k, "sched_switch", 2, "task_struct")
    {
        return Err("raw sched_switch does not pass the previous and next tasks".to_string());
    }
    let mut o = DStateOffsets {
        task_pid: off(k, "task_struct", "pid")?,
        task_tgid: off(k, "task_struct", "tgid")?,
        task_comm: off(k, "task_struct", "comm")?,
        ..DStateOffsets::ABSENT
    };
    // Optional: without it every switch in looks its thread up.
    if let Some(bits) = k
        .member("task_struct", "sched_contributes_to_load")
        .map(|m| m.bit_offset)
    {
        o.task_load_word = bits / 32 * 4;
        o.task_load_bit = bits % 32;
    }
    // The task's own state: the iterator reads it, and the switch where prev_state is no
    // argument (the fourth from 5.18).
    let state = k
        .member("task_struct", "__state")
        .or_else(|| k.member("task_struct", "state"))
        .filter(|m| matches!(m.size, 4 | 8))
        .ok_or("no task_struct.__state or .state of 4 or 8 bytes in the kernel's BTF")?;
    o.task_state = state.offset();
    o.task_state_size = state.size;
    if switch.len() >= 4 && switch[3].size == 4 && !switch[3].ty.contains('*') {
        o.switch_state_arg = 3;
    }
    if let Err(why) = clock(k, &mut o) {
        plan.notes.push(format!(
            "D episodes end when their thread runs again, its wait for a CPU counted as D: {why}"
        ));
    }
    plan.globals.dstate = o;
    // Both ends of an episode on one program: BTF-typed where the kernel allows it, so that
    // it can take the sleeper's stack as the episode ends; the plain one in its place.
    plan.steps.push(Step::btf(
        "dstate_switch_btf",
        "sched_switch",
        Part::WaitSites,
    ));
    plan.steps.push(
        Step::raw("dstate_switch_raw", "sched_switch", Part::DState)
            .instead_of("dstate_switch_btf"),
    );
    // The stacks of threads still in D, once per interval; the BTF-typed switch takes none.
    plan.steps
        .push(Step::iter("dstate_stuck", "task", Part::StuckSites).after("dstate_switch_btf"));
    Ok(())
}

/// The clock episodes are timed on: the runqueue's, reached from the task's CFS runqueue, and
/// the wakeup's enqueue stamp as the end; `Err` says what is missing, and `o.clock` what is
/// used instead.
fn clock(k: &KernelFacts, o: &mut DStateOffsets) -> Result<(), String> {
    let rq = (|| -> Result<(), String> {
        o.task_cfs_rq = off(k, "task_struct", "se")? + off(k, "sched_entity", "cfs_rq")?;
        match k.offset("cfs_rq", "rq") {
            Some(at) => o.cfs_rq_rq = at,
            None => o.rq_cfs = off(k, "rq", "cfs")?,
        }
        o.rq_clock = off(k, "rq", "clock")?;
        Ok(())
    })();
    if let Err(why) = rq {
        o.clock = CLOCK_KTIME;
        return Err(format!("no runqueue clock ({why})"));
    }
    match (
        k.offset("task_struct", "sched_info"),
        k.offset("sched_info", "last_queued"),
    ) {
        (Some(info), Some(queued)) => {
            o.task_last_queued = info + queued;
            o.clock = CLOCK_RQ_QUEUED;
            Ok(())
        }
        _ => {
            o.clock = CLOCK_RQ;
            Err("no sched_info.last_queued in the kernel's BTF (CONFIG_SCHED_INFO off)".into())
        }
    }
}

fn classic_dstate(k: &KernelFacts, plan: &mut Plan) {
    let fields = k
        .event("sched", "sched_wakeup")
        .and_then(|f| Some((f.field("pid")?.clone(), f.field("comm")?.clone())));
    let Some((pid, comm)) = fields.filter(|(pid, comm)| pid.size == 4 && comm.size == 16) else {
        plan.notes
            .push("no usable sched:sched_wakeup tracepoint: the D-state pane is off".to_string());
        return;
    };
    let switch = k.event("sched", "sched_switch");
    let Some(state) = switch
        .as_ref()
        .and_then(|f| f.field("prev_state"))
        .filter(|f| matches!(f.size, 4 | 8))
    else {
        plan.notes
            .push("no usable sched:sched_switch tracepoint: the D-state pane is off".to_string());
        return;
    };
    let o = &mut plan.globals.sched;
    o.wakeup_pid = pid.offset;
    o.wakeup_comm = comm.offset;
    o.prev_state = state.offset;
    o.prev_state_size = state.size;
    plan.steps.push(Step::classic(
        "dstate_wakeup",
        "sched",
        "sched_wakeup",
        Part::DState,
    ));
    plan.steps.push(
        Step::classic("dstate_switch", "sched", "sched_switch", Part::DState)
            .after("dstate_wakeup"),
    );
}

fn raw_exit(k: &KernelFacts, plan: &mut Plan) -> Result<(), String> {
    let params = k
        .raw_tracepoint("sched_process_exit")
        .ok_or("no raw sched_process_exit tracepoint")?;
    let l = &mut plan.globals.raw_layout;
    if params.get(1).is_some_and(|p| p.ty == "bool") {
        l.exit_group_dead_arg = 1;
    } else {
        l.exit_group_dead_arg = ABSENT;
        l.task_signal = off(k, "task_struct", "signal")?;
        l.signal_live = off(k, "signal_struct", "live")?;
    }
    plan.steps.push(Step::raw(
        "raw_process_exit",
        "sched_process_exit",
        Part::Exits,
    ));
    Ok(())
}

fn classic_exit(k: &KernelFacts, plan: &mut Plan) {
    match k.event("sched", "sched_process_exit") {
        Some(format) => {
            plan.globals.exit.group_dead = format
                .field("group_dead")
                .filter(|f| f.size == 1)
                .map_or(ABSENT, |f| f.offset);
            plan.steps.push(Step::classic(
                "process_exit",
                "sched",
                "sched_process_exit",
                Part::Exits,
            ));
        }
        None => plan.notes.push(
            "no sched:sched_process_exit tracepoint: exited processes are forgotten after 10 idle minutes"
                .to_string(),
        ),
    }
}
