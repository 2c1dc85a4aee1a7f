//! Loading and attaching the plan's programs: the globals they read, the verifier's time
//! spread over two threads, and what a refusal degrades.

use std::collections::HashMap;

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{
        BtfTracePoint, FEntry, FExit, Iter, Program, ProgramError, RawTracePoint, TracePoint,
    },
};
use iotop_bpf_common::{
    blame::GLOBAL_BLAME_OFFSETS,
    block::GLOBAL_RAW_OFFSETS,
    dio::{GLOBAL_DIO_OFFSETS, GLOBAL_RAW_DIO_OFFSETS},
    dstate::{
        GLOBAL_DSTATE_OFFSETS, GLOBAL_DSTATE_RECORD_MIN_NS, GLOBAL_SCHED_OFFSETS,
        GLOBAL_STACK_MIN_GAP_NS,
    },
    process::GLOBAL_EXIT_OFFSETS,
    raw::{GLOBAL_FAULT_INJECT, GLOBAL_RAW_LAYOUT, GLOBAL_SYSCALL_TABLE},
    sync::{
        GLOBAL_DURABLE_BTF, GLOBAL_DURABLE_OFFSETS, GLOBAL_FILE_OFFSETS, GLOBAL_SYSCALL_OFFSETS,
    },
    throttle::{GLOBAL_DIO_CALL_LATENCY, GLOBAL_DIRTY_OFFSETS},
    tracepoint::{
        GLOBAL_COMPLETE_FIELDS, GLOBAL_FRONTMERGE_FIELDS, GLOBAL_ISSUE_FIELDS,
        GLOBAL_RQ_MERGE_FIELDS, GLOBAL_START_FIELDS, GLOBAL_START_ORIGIN, GLOBAL_WAKEUP_BYTES,
    },
};

use crate::{
    plan::{Attach, Plan, Step, TRAMPOLINES},
    report::ProbeReport,
};

/// Bytes of unread ring data above which the kernel wakes the reader early (between the
/// reader's own drain ticks). A quarter of the ring leaves room for bursts while it drains.
const WAKEUP_BYTES: u64 = 1 << 20;

/// Finished D episodes shorter than this only add to their process's D time; longer ones are
/// streamed (one record each) for the "longest recent episodes" list.
const DSTATE_RECORD_MIN_NS: u64 = 1_000_000;

/// The least time between two stacks one CPU takes at a switch into D. A stack costs a few
/// µs of BPF time, and synchronous I/O switches into D once per request: at 1 ms, psync reads
/// paid ~140 ns each for stacks almost none of which were ever shown (an episode under 1 ms
/// is not streamed; a longer one takes its sleeper's stack at the wakeup). At 10 ms, at most
/// 100 stacks a second per CPU, which still names where a thread found in D at a tick waits
/// when /proc cannot (without CAP_SYS_ADMIN).
const STACK_MIN_GAP_NS: u64 = 10_000_000;

/// The raw tracepoint program `program` of the object.
pub(crate) fn raw_program<'a>(ebpf: &'a mut Ebpf, program: &str) -> Result<&'a mut RawTracePoint> {
    as_raw(ebpf.program_mut(program), program)
}

/// The classic tracepoint program `program` of the object.
pub(crate) fn classic_program<'a>(ebpf: &'a mut Ebpf, program: &str) -> Result<&'a mut TracePoint> {
    as_classic(ebpf.program_mut(program), program)
}

fn as_raw<'a>(found: Option<&'a mut Program>, program: &str) -> Result<&'a mut RawTracePoint> {
    found
        .ok_or_else(|| anyhow!("program {program} missing from the eBPF object"))?
        .try_into()
        .with_context(|| format!("{program} is not a raw tracepoint program"))
}

fn as_classic<'a>(found: Option<&'a mut Program>, program: &str) -> Result<&'a mut TracePoint> {
    found
        .ok_or_else(|| anyhow!("program {program} missing from the eBPF object"))?
        .try_into()
        .with_context(|| format!("{program} is not a tracepoint program"))
}

/// The object's programs by name, each borrowed on its own: one can be verified on another
/// thread while the others load.
type Programs<'a> = HashMap<&'a str, &'a mut Program>;

/// The programs the verifier takes longest over: the completion probe (~150 ms here, idle,
/// ~200 ms under load: more than all the others together), typed or raw. The first of them
/// the plan tries is verified on the other core while the others load, and attached in its
/// turn.
const VERIFIED_ASIDE: [&str; 2] = ["block_complete_btf", "raw_block_complete"];

/// The step whose program is verified aside: a first choice (tried whatever happens before
/// it) that nothing before it can skip.
fn verified_aside(plan: &Plan) -> Option<&Step> {
    plan.steps.iter().find(|s| {
        VERIFIED_ASIDE.contains(&s.program)
            && s.instead_of.is_none()
            && s.after.is_none()
            && matches!(s.attach, Attach::Raw(_) | Attach::Btf(_))
    })
}

/// Loads the program of `step`, a raw or `tp_btf` one (verified aside).
fn load_aside(program: &mut Program, step: &Step, btf: Option<&Btf>) -> Result<()> {
    match step.attach {
        Attach::Btf(name) => {
            let btf = btf.ok_or_else(|| anyhow!("the kernel's BTF could not be read"))?;
            let typed: &mut BtfTracePoint = program
                .try_into()
                .with_context(|| format!("{} is not a tp_btf program", step.program))?;
            Ok(typed.load(name, btf)?)
        }
        _ => Ok(as_raw(Some(program), step.program)?.load()?),
    }
}

/// Why a program could not be loaded or attached: one line, and the verifier's whole log
/// where it refused the program.
struct Refusal {
    line: String,
    log: Option<String>,
}

/// The verifier's reason in one line: its last line that is not a statistic.
fn verifier_reason(log: &str) -> Option<&str> {
    log.lines().rev().map(str::trim).find(|line| {
        !line.is_empty()
            && !line.starts_with("verification time")
            && !line.starts_with("stack depth")
            && !line.starts_with("processed ")
            && !line.starts_with(':')
    })
}

impl Refusal {
    /// `lockdown`: why the kernel refuses `bpf_probe_read*` here, if it does.
    fn of(error: anyhow::Error, lockdown: Option<&str>) -> Self {
        for cause in error.chain() {
            if let Some(ProgramError::LoadError {
                io_error,
                verifier_log,
            }) = cause.downcast_ref::<ProgramError>()
            {
                let log = verifier_log.to_string();
                let line = match (verifier_reason(&log), lockdown) {
                    // Said as what it is: lockdown's refusal of the helper, not a fault.
                    (Some(reason), Some(why))
                        if reason.contains("bpf_probe_read")
                            && (reason.contains("cannot use helper")
                                || reason.contains("unknown func")) =>
                    {
                        format!("it reads kernel memory with the helper: {why}")
                    }
                    (Some(reason), _) => format!("the verifier refused it: {reason} ({io_error})"),
                    (None, _) => format!("loading it failed: {io_error}"),
                };
                // An empty log is no verifier's refusal (an LSM's EPERM, say): the line says it.
                return Self {
                    line,
                    log: (!log.trim().is_empty()).then_some(log),
                };
            }
        }
        Self {
            line: format!("{error:#}"),
            log: None,
        }
    }
}

/// `step`'s program as the kind its attach point needs (`what`: "an fentry", for the error).
fn typed<'b, P>(programs: &'b mut Programs<'_>, step: &Step, what: &str) -> Result<&'b mut P>
where
    &'b mut P: TryFrom<&'b mut Program, Error = ProgramError>,
{
    programs
        .get_mut(step.program)
        .map(|p| &mut **p)
        .ok_or_else(|| anyhow!("program {} missing from the eBPF object", step.program))?
        .try_into()
        .with_context(|| format!("{} is not {what} program", step.program))
}

/// Loads `step`'s program (once per program) and attaches it, unless it is deferred.
fn load_and_attach(
    programs: &mut Programs<'_>,
    btf: Option<&Btf>,
    step: &Step,
    loaded: &mut std::collections::HashSet<&'static str>,
) -> Result<Option<Box<dyn Send>>> {
    let first = loaded.insert(step.program);
    match step.attach {
        Attach::Btf(name) => {
            let btf = btf.ok_or_else(|| anyhow!("the kernel's BTF could not be read"))?;
            let program: &mut BtfTracePoint = typed(programs, step, "a tp_btf")?;
            if first {
                program.load(name, btf)?;
            }
            let link = program
                .attach()
                .with_context(|| format!("attach to tp_btf {name}"))?;
            Ok(Some(Box::new(program.take_link(link)?)))
        }
        Attach::Entry(function) => {
            let btf = btf.ok_or_else(|| anyhow!("the kernel's BTF could not be read"))?;
            let program: &mut FEntry = typed(programs, step, "an fentry")?;
            if first {
                program.load(function, btf)?;
            }
            let link = program
                .attach()
                .with_context(|| format!("attach a trampoline to {function}"))?;
            Ok(Some(Box::new(program.take_link(link)?)))
        }
        Attach::Exit(function) => {
            let btf = btf.ok_or_else(|| anyhow!("the kernel's BTF could not be read"))?;
            let program: &mut FExit = typed(programs, step, "an fexit")?;
            if first {
                program.load(function, btf)?;
            }
            let link = program
                .attach()
                .with_context(|| format!("attach a trampoline to {function}'s return"))?;
            Ok(Some(Box::new(program.take_link(link)?)))
        }
        Attach::Iter(kind) => {
            let btf = btf.ok_or_else(|| anyhow!("the kernel's BTF could not be read"))?;
            let program: &mut Iter = typed(programs, step, "an iterator")?;
            if first {
                program.load(kind, btf)?;
            }
            // Run when read, never attached to an event.
            Ok(None)
        }
        Attach::Raw(name) => load_then_attach(
            as_raw(
                programs.get_mut(step.program).map(|p| &mut **p),
                step.program,
            )?,
            first,
            step.deferred,
            RawTracePoint::load,
            |program| {
                let link = program
                    .attach(name)
                    .with_context(|| format!("attach to raw tracepoint {name}"))?;
                Ok(Box::new(program.take_link(link)?))
            },
        ),
        Attach::Classic(category, name) => load_then_attach(
            as_classic(
                programs.get_mut(step.program).map(|p| &mut **p),
                step.program,
            )?,
            first,
            step.deferred,
            TracePoint::load,
            |program| {
                let link = program
                    .attach(category, name)
                    .with_context(|| format!("attach to tracepoint {category}:{name}"))?;
                Ok(Box::new(program.take_link(link)?))
            },
        ),
    }
}

/// Loads `program` the first time a step names it, then attaches it unless the step is
/// deferred: the raw and classic tracepoint arms, which differ only in their calls.
fn load_then_attach<P>(
    program: &mut P,
    first: bool,
    deferred: bool,
    load: fn(&mut P) -> Result<(), ProgramError>,
    attach: impl FnOnce(&mut P) -> Result<Box<dyn Send>>,
) -> Result<Option<Box<dyn Send>>> {
    if first {
        load(program)?;
    }
    if deferred {
        return Ok(None);
    }
    attach(program).map(Some)
}

/// The globals the programs read, from the plan, and the map sizes that depend on the machine.
pub(super) fn set_globals<'a>(loader: &mut EbpfLoader<'a>, plan: &'a Plan) {
    let g = &plan.globals;
    loader.override_global(GLOBAL_START_FIELDS, &g.start_fields, true);
    loader.override_global(GLOBAL_ISSUE_FIELDS, &g.issue_fields, true);
    loader.override_global(GLOBAL_COMPLETE_FIELDS, &g.complete_fields, true);
    loader.override_global(GLOBAL_FRONTMERGE_FIELDS, &g.frontmerge_fields, true);
    loader.override_global(GLOBAL_RQ_MERGE_FIELDS, &g.rq_merge_fields, true);
    loader.override_global(GLOBAL_SCHED_OFFSETS, &g.sched, true);
    loader.override_global(GLOBAL_DSTATE_OFFSETS, &g.dstate, true);
    loader.override_global(GLOBAL_DIO_OFFSETS, &g.dio, true);
    loader.override_global(GLOBAL_EXIT_OFFSETS, &g.exit, true);
    loader.override_global(GLOBAL_DSTATE_RECORD_MIN_NS, &DSTATE_RECORD_MIN_NS, true);
    loader.override_global(GLOBAL_STACK_MIN_GAP_NS, &STACK_MIN_GAP_NS, true);
    loader.override_global(GLOBAL_SYSCALL_OFFSETS, &g.syscalls, true);
    loader.override_global(GLOBAL_FILE_OFFSETS, &g.files, true);
    loader.override_global(GLOBAL_DURABLE_OFFSETS, &g.durable, true);
    loader.override_global(GLOBAL_DURABLE_BTF, &g.durable_btf, true);
    loader.override_global(GLOBAL_RAW_DIO_OFFSETS, &g.raw_dio, true);
    loader.override_global(GLOBAL_DIO_CALL_LATENCY, &g.dio_call_latency, true);
    loader.override_global(GLOBAL_DIRTY_OFFSETS, &g.dirty, true);
    loader.override_global(GLOBAL_START_ORIGIN, &g.start_origin, true);
    loader.override_global(GLOBAL_BLAME_OFFSETS, &g.blame, true);
    loader.override_global(GLOBAL_WAKEUP_BYTES, &WAKEUP_BYTES, true);
    loader.override_global(GLOBAL_RAW_OFFSETS, &g.raw_offsets, true);
    loader.override_global(GLOBAL_RAW_LAYOUT, &g.raw_layout, true);
    loader.override_global(GLOBAL_SYSCALL_TABLE, &g.syscall_table, true);
    loader.override_global(GLOBAL_FAULT_INJECT, &g.fault, true);
    // The per-(process, disk) sums are per CPU: their entries come from the CPUs there can
    // be, within a fixed memory budget.
    let cpus = aya::util::nr_cpus().map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX));
    loader.map_max_entries(
        iotop_bpf_common::aggregate::PROC_DISK_AGGREGATES,
        iotop_bpf_common::aggregate::entries_for(cpus),
    );
}

/// What loading and attaching the plan's programs came to.
pub(super) struct Attached<'p> {
    pub(super) links: Vec<Box<dyn Send>>,
    pub(super) deferred: Vec<Step>,
    /// Each program refused, once, with the first attach point it was meant for.
    pub(super) refused: Vec<(&'p Step, String)>,
    /// Why each program that is not attached is not.
    pub(super) failed: HashMap<&'p str, String>,
}

/// Loads and attaches the programs of `plan` in its order (the one [`VERIFIED_ASIDE`]
/// verified on a second thread meanwhile); what is attached goes into `report`.
pub(super) fn attach_all<'p>(
    ebpf: &mut Ebpf,
    plan: &'p Plan,
    btf: Option<&Btf>,
    report: &mut ProbeReport,
) -> Result<Attached<'p>> {
    let mut loaded = std::collections::HashSet::new();
    let mut links: Vec<Box<dyn Send>> = Vec::new();
    let mut deferred = Vec::new();
    let mut refused: Vec<(&Step, String)> = Vec::new();
    let mut failed: HashMap<&str, String> = HashMap::new();
    // Kept apart until every trampoline is attached: one refused detaches them all.
    let mut trampolines: Vec<Box<dyn Send>> = Vec::new();
    let mut programs: Programs<'_> = ebpf.programs_mut().collect();
    std::thread::scope(|scope| -> Result<()> {
        let mut aside = verified_aside(plan).and_then(|step| {
            let program = programs.remove(step.program)?;
            Some((
                step.program,
                scope.spawn(move || {
                    let result = load_aside(&mut *program, step, btf);
                    (program, result)
                }),
            ))
        });
        for step in &plan.steps {
            if passed_over(step, &mut failed, &mut refused) {
                continue;
            }
            // The program verified aside is taken back in its turn (its error, if the
            // verifier refused it, is this step's).
            let aside_refused = match aside.take_if(|(name, _)| *name == step.program) {
                Some((name, verifying)) => {
                    let (program, result) = verifying
                        .join()
                        .map_err(|_| anyhow!("verifying {name} panicked"))?;
                    programs.insert(name, program);
                    loaded.insert(name);
                    result.err()
                }
                None => None,
            };
            let attached = match aside_refused {
                Some(e) => Err(e),
                None => load_and_attach(&mut programs, btf, step, &mut loaded),
            };
            match attached {
                Ok(Some(link)) if step.is_trampoline() => {
                    trampolines.push(link);
                    report.attached.push(step.attach.to_string());
                }
                Ok(Some(link)) => {
                    links.push(link);
                    report.attached.push(step.attach.to_string());
                }
                Ok(None) if matches!(step.attach, Attach::Iter(_)) => {
                    report
                        .attached
                        .push(format!("{} (run each interval)", step.attach));
                }
                Ok(None) => {
                    report
                        .attached
                        .push(format!("{} (from the first io_uring sync)", step.attach));
                    deferred.push(step.clone());
                }
                Err(e) => {
                    let refusal = Refusal::of(e, plan.lockdown.as_deref());
                    if step.is_trampoline() {
                        // Their raw twins take over, alone: dropping a link detaches it.
                        trampolines.clear();
                        report
                            .attached
                            .retain(|a| !a.starts_with("fentry:") && !a.starts_with("fexit:"));
                        failed.insert(TRAMPOLINES, refusal.line.clone());
                    }
                    if step.required {
                        bail!(
                            "{} ({}) could not be used, and iotop-bpf needs it: {}{}",
                            step.program,
                            step.attach,
                            refusal.line,
                            if refusal.log.is_some() {
                                "; the verifier's log: `iotop-bpf check --verbose`"
                            } else {
                                ""
                            }
                        );
                    }
                    if let Some(log) = refusal.log {
                        report.refused.push((step.program.to_string(), log));
                    }
                    refused.push((step, refusal.line.clone()));
                    failed.insert(step.program, refusal.line);
                }
            }
        }
        Ok(())
    })?;
    drop(programs);
    links.append(&mut trampolines);
    Ok(Attached {
        links,
        deferred,
        refused,
        failed,
    })
}

/// Whether `step` is not tried: its program (or, for a trampoline, any trampoline) failed
/// already, its first choice was not refused, or what it follows is not attached (noted as
/// its refusal).
fn passed_over<'p>(
    step: &'p Step,
    failed: &mut HashMap<&'p str, String>,
    refused: &mut Vec<(&'p Step, String)>,
) -> bool {
    let before = step
        .is_trampoline()
        .then(|| failed.get(TRAMPOLINES))
        .flatten()
        .or_else(|| failed.get(step.program))
        .cloned();
    if let Some(reason) = before {
        failed.insert(step.program, reason);
        return true;
    }
    // The plainer program is for when the first choice was refused.
    if let Some(first_choice) = step.instead_of
        && !failed.contains_key(first_choice)
    {
        return true;
    }
    if let Some(first) = step.after
        && failed.contains_key(first)
    {
        let reason = format!("{first} is not attached");
        refused.push((step, reason.clone()));
        failed.insert(step.program, reason);
        return true;
    }
    false
}

/// Each refused program's loss in `report`, and the sync sources it leaves without a program.
pub(super) fn report_refusals(
    report: &mut ProbeReport,
    refused: &[(&Step, String)],
    failed: &HashMap<&str, String>,
) {
    for (step, reason) in refused {
        // Not a loss: the raw pair does the same work, and check's `system calls:` line
        // says why it runs instead (a note would take the status line's key hints).
        if step.is_trampoline() {
            continue;
        }
        // A program whose plainer replacement was refused too: the replacement's loss is
        // the whole of it, and said once. (Where the replacement runs, the first choice's
        // part says what the plainer one lacks.)
        if refused
            .iter()
            .any(|(other, _)| other.instead_of == Some(step.program))
        {
            continue;
        }
        report.degraded.push(format!(
            "{}: {} ({}) not attached: {reason}",
            step.part.loss(),
            step.program,
            step.attach
        ));
    }
    for source in &mut report.sync_sources {
        if source.status.is_err() {
            continue;
        }
        if let Some((program, why)) = source
            .programs
            .iter()
            .find_map(|p| failed.get(p).map(|why| (p, why)))
        {
            source.status = Err(format!("{program} not attached: {why}"));
        }
    }
}
