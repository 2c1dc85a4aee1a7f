//! The block probes: a request's creation, issue, merge and completion, and whom its
//! write-back is blamed on.

use iotop_bpf_common::{
    block::{ORIGIN_INSERT, ORIGIN_START},
    rwbs::RWBS_READ_LEN,
    tracepoint::{ABSENT, FieldOffsets, WINDOW_LEN, WINDOW_START},
};

use super::{KernelFacts, Part, Plan, Step, arg_is, arg_of, offsets};
use crate::tracefs::EventFormat;

/// Plans the block probes on raw tracepoints, or on classic ones when `no_raw` says why raw
/// ones cannot be used. `Err` when neither works: nothing to show then.
pub fn plan(
    k: &KernelFacts,
    no_raw: Option<&String>,
    classic: &Result<(), String>,
    plan: &mut Plan,
) -> Result<(), String> {
    let raw = match no_raw {
        Some(why) => Err(why.clone()),
        None => raw(k, plan),
    };
    match raw {
        Ok(()) => {
            plan.mode = "raw tracepoints, kernel objects read at BTF offsets".to_string();
            Ok(())
        }
        Err(why) => {
            if let Err(no_classic) = classic {
                return Err(format!(
                    "the block probes can use neither raw tracepoints ({why}) nor classic ones ({no_classic})"
                ));
            }
            plan.mode = format!("classic tracepoints ({why})");
            plan.notes.push(format!(
                "classic tracepoints ({why}): requests have no cgroup, write-back is charged to the flusher, and queue time is not split at the scheduler (G2I/I2D)"
            ));
            self::classic(k, plan)
        }
    }
}

/// The raw probes: requests keyed by their `struct request *`.
fn raw(k: &KernelFacts, plan: &mut Plan) -> Result<(), String> {
    let offsets = offsets::request(k).map_err(|e| format!("kernel BTF: {e}"))?;
    // Where the request is among each tracepoint's arguments: the same index for all of them
    // (the queue came first before 5.11 upstream; Debian's 5.10 has the newer form).
    let start = if k.raw_tracepoint("block_io_start").is_some() {
        "block_io_start"
    } else {
        "block_rq_insert"
    };
    let mut index = None;
    for tracepoint in [start, "block_rq_issue", "block_rq_merge"] {
        let at = arg_of(k, tracepoint, "request").ok_or_else(|| {
            format!("raw tracepoint {tracepoint} passes no struct request * here")
        })?;
        if index.is_some_and(|i| i != at) {
            return Err(format!(
                "the raw block tracepoints pass the request at different places ({tracepoint}: argument {at})"
            ));
        }
        index = Some(at);
    }
    if !arg_is(k, "block_rq_complete", 0, "request") {
        return Err("raw tracepoint block_rq_complete does not pass the request first".into());
    }
    plan.globals.raw_offsets = offsets;
    plan.globals.raw_layout.rq_arg = index.unwrap_or(0);
    plan.globals.raw_layout.rq_disk = k.offset("request", "rq_disk").unwrap_or(ABSENT);
    // Under confidentiality lockdown, which refuses `bpf_probe_read_kernel`, only the typed
    // probes load: no fallback to the raw ones is planned there.
    let lockdown = k.lockdown_refuses_reads();
    if start == "block_io_start" {
        plan.globals.start_origin = ORIGIN_START;
        plan.steps
            .push(Step::raw("raw_block_start", start, Part::Block));
        // btt's G2I / I2D split: switched on while a disk with a scheduler is busy.
        typed_first(
            plan,
            ("block_insert_btf", "raw_block_insert"),
            "block_rq_insert",
            Part::SchedSplit,
            lockdown.is_some(),
        );
    } else {
        plan.globals.start_origin = ORIGIN_INSERT;
        plan.steps
            .push(Step::raw("raw_block_start_insert", start, Part::Block));
        plan.notes.push(
            "no block_io_start tracepoint (before 6.5): a request is attributed to the task that inserted it, or issued it when it went to the driver directly; queue time is not split at the scheduler (G2I/I2D)"
                .to_string(),
        );
    }
    for (programs, tracepoint) in [
        (("block_issue_btf", "raw_block_issue"), "block_rq_issue"),
        (
            ("block_complete_btf", "raw_block_complete"),
            "block_rq_complete",
        ),
    ] {
        typed_first(plan, programs, tracepoint, Part::Block, lockdown.is_some());
    }
    plan.steps.push(Step::raw(
        "raw_block_rq_merge",
        "block_rq_merge",
        Part::Merges,
    ));

    let (mut blame, missing) = offsets::blame(k);
    plan.notes.extend(missing);
    if let Some(why) = lockdown {
        // Blame follows untyped pointers (a tail page's head, a page's mapping), which only
        // the helper reads: off, and the completion probe never calls it.
        plan.notes.push(format!(
            "{why}: requests have no cgroup, write-back is charged to the flusher, and readahead reads name no file"
        ));
        plan.globals.blame = iotop_bpf_common::blame::BlameOffsets::OFF;
        return Ok(());
    }
    if blame.writeback != 0 {
        // The folio tracepoint (5.17+) or the page one before it: both pass the mapping
        // second.
        let dirtied = ["writeback_dirty_folio", "writeback_dirty_page"]
            .into_iter()
            .find(|tp| arg_is(k, tp, 1, "address_space"));
        match dirtied {
            Some(tracepoint) => plan.steps.push(Step::raw(
                "blame_dirty_folio",
                tracepoint,
                Part::WritebackBlame,
            )),
            None => {
                blame.writeback = 0;
                plan.notes.push(
                    "no writeback_dirty_folio or writeback_dirty_page raw tracepoint: write-back is charged to the flusher, not to the process that dirtied the pages"
                        .to_string(),
                );
            }
        }
    }
    plan.globals.blame = blame;
    Ok(())
}

/// Plans `programs.0` on `tp_btf`, which reads the request by direct loads, and
/// `programs.1`, the raw program doing the same work with the helper, for where the kernel
/// refuses the first (none under lockdown, which refuses the helper). Part `Block`: whichever
/// loads is required. The first serves `part` only under lockdown; elsewhere, refused, it
/// costs only the direct loads (`Part::TypedReads`), its twin doing the work.
fn typed_first(
    plan: &mut Plan,
    programs: (&'static str, &'static str),
    tracepoint: &'static str,
    part: Part,
    lockdown: bool,
) {
    let (typed, raw) = programs;
    let required = part == Part::Block;
    if lockdown {
        let first = Step::btf(typed, tracepoint, part);
        plan.steps
            .push(if required { first.required() } else { first });
        return;
    }
    plan.steps
        .push(Step::btf(typed, tracepoint, Part::TypedReads));
    let fallback = Step::raw(raw, tracepoint, part).instead_of(typed);
    plan.steps.push(if required {
        fallback.required()
    } else {
        fallback
    });
}

/// The classic probes: requests keyed by their disk and sector, fields at tracefs offsets.
fn classic(k: &KernelFacts, plan: &mut Plan) -> Result<(), String> {
    let found = |name: &'static str| k.event("block", name).map(|f| (name, f));
    let Some((start, start_format)) = found("block_io_start").or_else(|| found("block_rq_insert"))
    else {
        plan.notes.push(
            "no block_io_start or block_rq_insert tracepoint: I/O is attributed to the task that issued it (may be a kworker), and queue time is 0"
                .to_string(),
        );
        return classic_rest(k, plan);
    };
    plan.globals.start_fields = field_offsets(&start_format)?;
    plan.globals.start_origin = if start == "block_io_start" {
        ORIGIN_START
    } else {
        plan.notes.push(
            "block_io_start is missing (before 6.5): requests issued without an I/O scheduler are attributed when issued"
                .to_string(),
        );
        ORIGIN_INSERT
    };
    plan.steps
        .push(Step::classic("block_start", "block", start, Part::Block));
    classic_rest(k, plan)
}

fn classic_rest(k: &KernelFacts, plan: &mut Plan) -> Result<(), String> {
    let need = |name: &str| {
        k.event("block", name).ok_or_else(|| {
            format!("tracepoint block:{name} is missing from this kernel; iotop-bpf needs it")
        })
    };
    plan.globals.issue_fields = field_offsets(&need("block_rq_issue")?)?;
    plan.globals.complete_fields = field_offsets(&need("block_rq_complete")?)?;
    plan.steps
        .push(Step::classic("block_issue", "block", "block_rq_issue", Part::Block).required());
    plan.steps.push(
        Step::classic("block_complete", "block", "block_rq_complete", Part::Block).required(),
    );
    for (program, name, part) in [
        ("block_frontmerge", "block_bio_frontmerge", Part::Merges),
        ("block_rq_merge", "block_rq_merge", Part::Merges),
    ] {
        match k.event("block", name).map(|f| field_offsets(&f)) {
            Some(Ok(fields)) => {
                if program == "block_frontmerge" {
                    plan.globals.frontmerge_fields = fields;
                } else {
                    plan.globals.rq_merge_fields = fields;
                }
                plan.steps.push(Step::classic(program, "block", name, part));
            }
            _ => plan.notes.push(format!(
                "{program}: tracepoint block:{name} missing or unreadable: {}",
                part.loss()
            )),
        }
    }
    Ok(())
}

/// The offsets of the fields the classic probes read, checked for the sizes they assume.
pub fn field_offsets(format: &EventFormat) -> Result<FieldOffsets, String> {
    let find = |name: &str, sizes: &[u32]| -> Result<u32, String> {
        let window = WINDOW_START..WINDOW_START + WINDOW_LEN;
        match format.field(name) {
            None => Ok(ABSENT),
            Some(field)
                if !window.contains(&(field.offset as usize))
                    || field.offset as usize + field.size.min(RWBS_READ_LEN as u32) as usize
                        > window.end =>
            {
                Err(format!(
                    "tracepoint {}: field {name} at offset {} lies outside the bytes the probes read ({window:?})",
                    format.name, field.offset
                ))
            }
            Some(field) if name == "rwbs" && field.size as usize >= RWBS_READ_LEN => {
                Ok(field.offset)
            }
            // Numbers are read with single aligned loads: refuse a layout that misaligns them.
            Some(field) if sizes.contains(&field.size) && field.offset % field.size == 0 => {
                Ok(field.offset)
            }
            Some(field) if sizes.contains(&field.size) => Err(format!(
                "tracepoint {}: field {name} at offset {} is not {}-byte aligned",
                format.name, field.offset, field.size
            )),
            Some(field) => Err(format!(
                "tracepoint {}: field {name} is {} bytes, expected {sizes:?}",
                format.name, field.size
            )),
        }
    };
    let offsets = FieldOffsets {
        dev: find("dev", &[4])?,
        sector: find("sector", &[8])?,
        nr_sector: find("nr_sector", &[4])?,
        bytes: find("bytes", &[4])?,
        error: find("error", &[4])?,
        rwbs: find("rwbs", &[])?,
    };
    if offsets.dev == ABSENT || offsets.sector == ABSENT {
        return Err(format!(
            "tracepoint {} has no dev/sector fields",
            format.name
        ));
    }
    Ok(offsets)
}
