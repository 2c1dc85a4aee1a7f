//! The wait before the request and direct I/O calls: `iomap_dio_rw_begin` (unaligned and
//! tail direct I/O; with `iomap_dio_complete`, call latency) and `balance_dirty_pages`
//! (dirty throttling).

use iotop_bpf_common::{
    dio::DioOffsets,
    throttle::{DIRTY_BDI_LEN, DirtyOffsets},
    tracepoint::ABSENT,
};

use super::{KernelFacts, Part, Plan, Step, arg_is, offsets};
use crate::btf::Param;

pub fn plan(k: &KernelFacts, raw: bool, classic: &Result<(), String>, plan: &mut Plan) {
    direct_io(k, raw, classic, plan);
    dirty(k, raw, classic, plan);
}

fn direct_io(k: &KernelFacts, raw: bool, classic: &Result<(), String>, plan: &mut Plan) {
    let raw_dio =
        (raw && arg_is(k, "iomap_dio_rw_begin", 0, "kiocb") && plan.globals.files.file_inode != 0)
            .then(|| offsets::dio(k).ok())
            .flatten();
    if let Some(dio) = raw_dio {
        plan.globals.raw_dio = dio;
        plan.steps.push(Step::raw(
            "raw_dio_begin",
            "iomap_dio_rw_begin",
            Part::DirectIo,
        ));
        // Call latency: the completion takes what the begin probe noted, by kiocb.
        if arg_is(k, "iomap_dio_complete", 0, "kiocb") {
            plan.globals.dio_call_latency = 1;
            plan.call_latency = true;
            plan.steps.push(Step::raw(
                "raw_dio_complete",
                "iomap_dio_complete",
                Part::CallLatency,
            ));
        } else {
            plan.notes.push(format!(
                "{}: no raw iomap_dio_complete(struct kiocb *) tracepoint",
                Part::CallLatency.loss()
            ));
        }
        return;
    }
    let why = if k.raw_tracepoint("iomap_dio_rw_begin").is_none() && k.has_btf() {
        "no iomap_dio_rw_begin tracepoint (before 6.4)".to_string()
    } else {
        "the raw iomap_dio_rw_begin probe cannot run here".to_string()
    };
    plan.notes.push(format!(
        "{}: it needs the raw iomap_dio_rw_begin tracepoint ({why})",
        Part::CallLatency.loss()
    ));
    // Before 6.4: the calls from the iomap operation a direct I/O starts with. Before 5.15
    // direct I/O runs one iomap_apply per extent (the tracepoint is gone after); then one
    // iomap_iter loop.
    if raw && plan.globals.files.inode_sb != 0 {
        let fallback = if k
            .raw_tracepoint("iomap_apply")
            .is_some_and(|p| p.len() >= 4 && p[0].ty == "struct inode *" && p[3].size == 4)
        {
            offsets::off(k, "inode", "i_size").ok().map(|inode_size| {
                (
                    "raw_dio_apply",
                    "iomap_apply",
                    iotop_bpf_common::dio::RawDioOffsets {
                        inode_size,
                        ..iotop_bpf_common::dio::RawDioOffsets::ZERO
                    },
                )
            })
        } else if arg_is(k, "iomap_iter", 0, "iomap_iter") {
            offsets::dio_iter(k)
                .ok()
                .map(|o| ("raw_dio_iter", "iomap_iter", o))
        } else {
            None
        };
        if let Some((program, tracepoint, offsets)) = fallback {
            plan.globals.raw_dio = offsets;
            plan.steps
                .push(Step::raw(program, tracepoint, Part::DirectIo));
            return;
        }
    }
    let classic_dio = k
        .event("iomap", "iomap_dio_rw_begin")
        .ok_or(why.clone())
        .and_then(|format| classic.clone().map(|()| format))
        .and_then(|format| {
            let mut offsets = DioOffsets::ABSENT;
            for (name, size, slot) in [
                ("dev", 4, &mut offsets.dev),
                ("ino", 8, &mut offsets.ino),
                ("isize", 8, &mut offsets.isize),
                ("pos", 8, &mut offsets.pos),
                ("count", 8, &mut offsets.count),
                ("ki_flags", 4, &mut offsets.ki_flags),
                ("dio_flags", 4, &mut offsets.dio_flags),
            ] {
                match format.field(name) {
                    Some(f) if f.size == size && f.offset % size == 0 => *slot = f.offset,
                    _ if name == "dio_flags" => *slot = ABSENT,
                    _ => {
                        return Err(format!(
                            "iomap:iomap_dio_rw_begin has no usable field {name}"
                        ));
                    }
                }
            }
            Ok(offsets)
        });
    match classic_dio {
        Ok(offsets) => {
            plan.globals.dio = offsets;
            plan.steps.push(Step::classic(
                "dio_begin",
                "iomap",
                "iomap_dio_rw_begin",
                Part::DirectIo,
            ));
        }
        Err(e) if e == why => plan.notes.push(format!("{}: {why}", Part::DirectIo.loss())),
        Err(e) => plan
            .notes
            .push(format!("{}: {why}; {e}", Part::DirectIo.loss())),
    }
}

/// The argument named `name`, else the one at `index` where BTF names none (the prototype's
/// shape was checked).
fn named(params: &[Param], name: &str, index: usize) -> Option<u32> {
    let at = if params.iter().any(|p| p.name.is_some()) {
        params
            .iter()
            .position(|p| p.name.as_deref() == Some(name))?
    } else {
        index
    };
    (params.get(at)?.size == 8)
        .then_some(at)
        .and_then(|at| u32::try_from(at).ok())
}

/// Where the raw dirty-pause probe finds its figures: `balance_dirty_pages(wb, thresh,
/// bg_thresh, dirty, bdi_thresh, bdi_dirty, dirty_ratelimit, task_ratelimit, dirtied,
/// period, pause, start_time)`, by name where BTF names the arguments, else by position in
/// that shape; or `(wb, dtc, dirty_ratelimit, ..., pause, start_time)` (6.18+), with the
/// figures in the `struct dirty_throttle_control`.
fn raw_dirty(k: &KernelFacts, l: &mut iotop_bpf_common::raw::RawLayout) -> Option<()> {
    let p = k.raw_tracepoint("balance_dirty_pages")?;
    if !arg_is(k, "balance_dirty_pages", 0, "bdi_writeback") {
        return None;
    }
    l.dirty_wb_arg = 0;
    if let Some(dtc) = p
        .iter()
        .position(|p| p.ty == "struct dirty_throttle_control *")
    {
        l.dirty_dtc_arg = u32::try_from(dtc).ok()?;
        l.dtc_thresh = k.offset("dirty_throttle_control", "thresh")?;
        l.dtc_dirty = k.offset("dirty_throttle_control", "dirty")?;
        l.dtc_wb_dirty = k.offset("dirty_throttle_control", "wb_dirty")?;
        l.dirty_pause_arg = named(&p, "pause", usize::MAX)?;
    } else {
        if p.len() != 12 {
            return None;
        }
        l.dirty_thresh_arg = named(&p, "thresh", 1)?;
        l.dirty_dirty_arg = named(&p, "dirty", 3)?;
        l.dirty_wb_dirty_arg = named(&p, "bdi_dirty", 5).or_else(|| named(&p, "wb_dirty", 5))?;
        l.dirty_pause_arg = named(&p, "pause", 10)?;
    }
    l.jiffy_us = k
        .tick_ns
        .and_then(|ns| u32::try_from(ns / 1_000).ok())
        .unwrap_or(0);
    l.wb_bdi = k.offset("bdi_writeback", "bdi")?;
    l.bdi_dev_name = k
        .member("backing_dev_info", "dev_name")
        .filter(|m| m.size as usize >= DIRTY_BDI_LEN)?
        .offset();
    Some(())
}

fn dirty(k: &KernelFacts, raw: bool, classic: &Result<(), String>, plan: &mut Plan) {
    let mut layout = plan.globals.raw_layout;
    if raw && raw_dirty(k, &mut layout).is_some() {
        plan.globals.raw_layout = layout;
        plan.steps.push(Step::raw(
            "raw_dirty_pause",
            "balance_dirty_pages",
            Part::DirtyPauses,
        ));
        return;
    }
    let classic = classic.clone().and_then(|()| {
        let format = k.event("writeback", "balance_dirty_pages").ok_or(
            "no writeback:balance_dirty_pages tracepoint: buffered writers paused by dirty throttling are not seen",
        )?;
        let find = |name: &str, size: u32, align: u32| match format.field(name) {
            Some(f) if f.size == size && f.offset % align == 0 => Ok(f.offset),
            Some(f) => Err(format!(
                "writeback:balance_dirty_pages: field {name} is {} bytes at offset {} (expected {size}, {align}-byte aligned)",
                f.size, f.offset
            )),
            None => Err(format!("writeback:balance_dirty_pages has no field {name}")),
        };
        let bdi_len = u32::try_from(DIRTY_BDI_LEN).unwrap_or(u32::MAX);
        Ok(DirtyOffsets {
            bdi: find("bdi", bdi_len, 1)?,
            limit: find("limit", 8, 8)?,
            dirty: find("dirty", 8, 8)?,
            wb_dirty: find("wb_dirty", 8, 8)?,
            pause: find("pause", 8, 8)?,
            _pad: 0,
        })
    });
    match classic {
        Ok(offsets) => {
            plan.globals.dirty = offsets;
            plan.steps.push(Step::classic(
                "dirty_pause",
                "writeback",
                "balance_dirty_pages",
                Part::DirtyPauses,
            ));
        }
        Err(e) => plan
            .notes
            .push(format!("{}: {e}", Part::DirtyPauses.loss())),
    }
}
