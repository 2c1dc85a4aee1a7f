//! Every way a process makes data durable, and which of them this kernel lets the probes see:
//! the sync system calls (planned in `syscalls.rs`), writes on `O_SYNC`/`O_DSYNC` files (the
//! filesystems' own fsync tracepoints, which fire inside the write), io_uring's fsync and
//! sync_file_range (its punt and completion tracepoints), and FUA writes (block request
//! flags). `iotop-bpf check` lists each with how it is traced or why it is not.

use iotop_bpf_common::{
    sync::{DurableBtf, RAW_COMPLETE_CQE, RAW_COMPLETE_RES},
    tracepoint::{WINDOW_LEN, WINDOW_START},
};

use super::{
    KernelFacts, Part, Plan, Step, arg_is, arg_of,
    syscalls::{self, Abi},
};
use crate::tracefs::EventFormat;

mod synced_writes;

/// The ways to make data durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncSourceKind {
    SyncCalls,
    SyncedWritesExt4,
    SyncedWritesXfs,
    SyncedWritesBtrfs,
    UringSyncs,
    UringWrites,
    Fua,
}

/// One way to make data durable, and how it is traced here or why it is not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncSource {
    pub kind: SyncSourceKind,
    pub name: &'static str,
    /// `Ok(how)` when traced, `Err(why not)` otherwise.
    pub status: Result<String, String>,
    /// The programs it needs attached: one the kernel refuses makes it `Err`.
    pub programs: Vec<&'static str>,
}

/// The offset of `name` if it is `size` bytes, naturally aligned, inside the bytes the probes
/// read (`read` bytes are read from it: 8 for a one-byte field read as eight).
fn field(format: &EventFormat, name: &str, size: u32, read: u32) -> Option<u32> {
    let f = format.field(name)?;
    let window = WINDOW_START as u32..(WINDOW_START + WINDOW_LEN) as u32;
    (f.size == size
        && f.offset % size == 0
        && window.contains(&f.offset)
        && f.offset + read <= window.end)
        .then_some(f.offset)
}

/// What ends a synced write on filesystems without an exit tracepoint: the raw `sys_exit`,
/// or the classic write exits (with their program).
struct WriteEnd {
    /// The program every entry-only probe is attached after.
    program: &'static str,
    how: &'static str,
}

/// How a synced write ends where the raw `sys_exit` ends it.
const RAW_WRITE_END: &str = "ended by the write's exit (raw sys_exit)";

/// How the sync calls are traced where their trampolines are attached: the plan says the
/// raw pair, which is what runs wherever one is refused.
pub fn on_trampolines(sources: &mut [SyncSource]) {
    for source in sources {
        let Ok(how) = &mut source.status else {
            continue;
        };
        if source.kind == SyncSourceKind::SyncCalls {
            *how = format!(
                "trampolines (fentry/fexit on each call): {} (entry and exit)",
                syscalls::sync_calls()
            );
        } else {
            *how = how.replace(RAW_WRITE_END, "ended by the write's exit (its fexit)");
        }
    }
}

/// Plans the probes of every way to make data durable after the sync calls' own (their
/// steps already in `plan`), and lists each source with how it is traced or why it is not.
pub fn plan(k: &KernelFacts, raw: bool, classic: &Result<(), String>, plan: &mut Plan) {
    let raw_syscalls = plan.steps.iter().any(|s| s.program == "raw_sys_exit");
    sync_calls(raw_syscalls, plan);

    let mut b = durable_btf(k);
    plan.globals.durable_btf = b;
    let registers = if b.reads_registers() {
        Ok(())
    } else if let Some(e) = &k.btf_error {
        Err(format!("{e}: the write that synced cannot be recognised"))
    } else if !task_pt_regs(k) {
        Err("the kernel has no bpf_task_pt_regs (5.15+): the write that synced cannot be recognised".to_string())
    } else {
        Err("the kernel's struct pt_regs does not say where a call's fd and number are: the write that synced cannot be recognised".to_string())
    };

    // What ends a synced write where the filesystem has no exit tracepoint.
    let write_end = if raw_syscalls {
        Some(WriteEnd {
            program: "raw_sys_exit",
            how: RAW_WRITE_END,
        })
    } else if classic.is_ok() {
        synced_writes::classic_write_exits(k, plan, &mut b)
    } else {
        None
    };
    if raw_syscalls
        && b.reads_registers()
        && let Ok(abi) = Abi::of(k)
    {
        // Synced writes io_uring runs inline end at io_uring_enter's exit.
        b.uring_enter_nr = abi.io_uring_enter();
    }

    synced_writes::plan(k, raw, classic, &registers, write_end.as_ref(), plan);

    uring_sources(k, raw, classic, &mut b, plan);
    plan.sync_sources.push(SyncSource {
        kind: SyncSourceKind::Fua,
        name: "FUA writes",
        status: Ok(
            "the requests' FUA flag, per process; disks say whether they honour it (sysfs queue/fua)"
                .to_string(),
        ),
        programs: Vec::new(),
    });
    plan.globals.durable_btf = b;
}

/// The sync system calls: traced by the raw syscall tracepoints or the classic ones already
/// planned (`syscalls.rs`).
fn sync_calls(raw_syscalls: bool, plan: &mut Plan) {
    let sync_programs: Vec<&'static str> = plan
        .steps
        .iter()
        .filter(|s| s.part == Part::SyncCalls)
        .map(|s| s.program)
        .collect();
    plan.sync_sources.push(SyncSource {
        kind: SyncSourceKind::SyncCalls,
        name: "fsync, fdatasync, sync_file_range, syncfs, sync, msync(MS_SYNC)",
        status: if raw_syscalls {
            Ok(format!(
                "raw sys_enter/sys_exit: {} (entry and exit)",
                syscalls::sync_calls()
            ))
        } else if sync_programs.is_empty() {
            Err("no syscall tracepoints".to_string())
        } else {
            Ok(format!(
                "syscalls:{} (entry and exit)",
                syscalls::sync_calls()
            ))
        },
        programs: sync_programs,
    });
}

/// io_uring's fsync and sync_file_range, and its writes on synced files: traced by the punt
/// to io-wq and the completion.
fn uring_sources(
    k: &KernelFacts,
    raw: bool,
    classic: &Result<(), String>,
    b: &mut DurableBtf,
    plan: &mut Plan,
) {
    let uring = uring(k, raw, classic, b, plan);
    if let Err(why) = &uring {
        plan.notes.push(format!(
            "io_uring IORING_OP_FSYNC/SYNC_FILE_RANGE: not traced ({why})"
        ));
    }
    let inline = if b.uring_enter_nr == u32::MAX {
        "inline ones not followed (no io_uring_enter exit, registers or write exits)"
    } else {
        "inline ones from the filesystem's tracepoint in io_uring_enter to the next one or the call's exit"
    };
    let (uring_status, uring_programs) = match uring {
        Ok((programs, how)) => (Ok(how), programs),
        Err(why) => (Err(why), Vec::new()),
    };
    let uring_writes = match &uring_status {
        Ok(_) if b.finds_workers() => Ok(format!(
            "punted ones from the filesystem's tracepoint in the io-wq worker to io_uring_complete; {inline}"
        )),
        Ok(_) => {
            Err("io-wq workers not recognised (no kernel BTF for io_worker/io_kiocb)".to_string())
        }
        Err(why) => Err(why.clone()),
    };
    plan.sync_sources.push(SyncSource {
        kind: SyncSourceKind::UringSyncs,
        name: "io_uring IORING_OP_FSYNC (fdatasync too), IORING_OP_SYNC_FILE_RANGE",
        status: uring_status,
        programs: uring_programs.clone(),
    });
    plan.sync_sources.push(SyncSource {
        kind: SyncSourceKind::UringWrites,
        name: "io_uring writes on O_SYNC/O_DSYNC files or with RWF_DSYNC",
        status: uring_writes,
        programs: uring_programs,
    });
}

/// A traced source: its programs and how it is traced.
type Traced = Result<(Vec<&'static str>, String), String>;

/// io_uring: the punt to io-wq and the completion.
fn uring(
    k: &KernelFacts,
    raw: bool,
    classic: &Result<(), String>,
    b: &mut DurableBtf,
    plan: &mut Plan,
) -> Traced {
    // The completion runs on every io_uring completion of the host: raw where BTF says what
    // it passes (no trace record built for it), and attached only from the first sync.
    let complete = if raw && b.raw_complete != 0 {
        plan.steps.push(
            Step::raw("raw_uring_complete", "io_uring_complete", Part::UringSyncs).deferred(),
        );
        Some("raw_uring_complete")
    } else {
        b.raw_complete = 0;
        None
    };
    let punt = match arg_of(k, "io_uring_queue_async_work", "io_kiocb") {
        Some(at) if raw && complete.is_some() && k.offset("io_kiocb", "opcode").is_some() => {
            plan.globals.raw_layout.punt_req_arg = at;
            plan.globals.raw_layout.req_opcode = k.offset("io_kiocb", "opcode").unwrap_or(0);
            Some("raw_uring_punt")
        }
        _ => None,
    };
    if let (Some(complete), Some(punt)) = (complete, punt) {
        plan.steps.push(
            Step::raw(
                "raw_uring_punt",
                "io_uring_queue_async_work",
                Part::UringSyncs,
            )
            .after(complete),
        );
        return Ok((
            vec![complete, punt],
            workers(b, "raw io_uring_queue_async_work to io_uring_complete"),
        ));
    }
    // The raw ones are not planned: no half of them either.
    plan.steps.retain(|s| s.program != "raw_uring_complete");
    b.raw_complete = 0;
    let why_not_raw = if !raw {
        "raw tracepoints are not used"
    } else if k.raw_tracepoint("io_uring_complete").is_none() {
        "no raw io_uring_complete tracepoint"
    } else {
        "raw io_uring_complete passes no request here"
    };
    classic
        .clone()
        .map_err(|e| format!("{why_not_raw}, and {e}"))?;
    let (Some(punt), Some(done)) = (
        k.event("io_uring", "io_uring_queue_async_work"),
        k.event("io_uring", "io_uring_complete"),
    ) else {
        return Err("no io_uring:io_uring_queue_async_work/io_uring_complete tracepoints".into());
    };
    let o = &mut plan.globals.durable;
    match (
        field(&punt, "req", 8, 8),
        field(&punt, "opcode", 1, 8),
        field(&done, "req", 8, 8),
        field(&done, "res", 4, 4),
    ) {
        (Some(req), Some(opcode), Some(done_req), Some(res)) => {
            (o.punt_req, o.punt_opcode, o.complete_req, o.complete_res) =
                (req, opcode, done_req, res);
        }
        _ => return Err("the io_uring tracepoints have an unexpected layout".to_string()),
    }
    plan.steps.push(
        Step::classic(
            "uring_complete",
            "io_uring",
            "io_uring_complete",
            Part::UringSyncs,
        )
        .deferred(),
    );
    plan.steps.push(
        Step::classic(
            "uring_punt",
            "io_uring",
            "io_uring_queue_async_work",
            Part::UringSyncs,
        )
        .after("uring_complete"),
    );
    Ok((
        vec!["uring_complete", "uring_punt"],
        workers(b, "io_uring:io_uring_queue_async_work to io_uring_complete"),
    ))
}

fn workers(b: &DurableBtf, how: &str) -> String {
    if b.finds_workers() {
        format!("{how}; the io-wq worker's writes are the sync's own")
    } else {
        format!(
            "{how} (io-wq workers not recognised: no kernel BTF for io_worker/io_kiocb; their writes are not counted as the sync's own)"
        )
    }
}

/// bpf_task_pt_regs and bpf_get_current_task_btf (5.15+), told by the helpers the kernel's
/// BTF lists.
fn task_pt_regs(k: &KernelFacts) -> bool {
    k.enum_value("BPF_FUNC_task_pt_regs").is_some()
        && k.enum_value("BPF_FUNC_get_current_task_btf").is_some()
}

/// The kernel-object offsets the probes read, from BTF; what is missing switches its use off.
fn durable_btf(k: &KernelFacts) -> DurableBtf {
    let mut b = DurableBtf::ABSENT;
    if !k.has_btf() {
        return b;
    }
    let off = |s: &str, m: &str| k.offset(s, m);
    // The thread's user registers, where the kernel can hand them to a probe.
    if task_pt_regs(k)
        && let Ok(abi) = Abi::of(k)
        && let Some((arg0, nr)) = abi.current_call(k)
    {
        b.use_regs = 1;
        b.regs_arg0 = arg0;
        b.regs_nr = nr;
        let writes = abi
            .calls()
            .filter(|(name, ..)| name.contains("write"))
            .map(|(_, nr, _)| nr);
        for (slot, nr) in b.write_nrs.iter_mut().zip(writes) {
            *slot = nr;
        }
    }
    if let (Some(private), Some(task), Some(cur), Some(work)) = (
        off("task_struct", "worker_private"),
        off("io_worker", "task"),
        off("io_worker", "cur_work"),
        off("io_kiocb", "work"),
    ) {
        b.use_workers = 1;
        (
            b.task_worker_private,
            b.worker_task,
            b.worker_cur_work,
            b.req_work,
        ) = (private, task, cur, work);
    }
    if let Some(file) = off("io_kiocb", "file") {
        b.req_file = file;
    }
    if let (Some(cmd), Some(flags)) = (off("io_kiocb", "cmd"), off("io_sync", "flags")) {
        b.req_sync_flags = cmd + flags;
    }
    // io_uring_complete(ctx, req, cqe) since 6.3; (ctx, req, user_data, res, cflags[, extra1,
    // extra2]) before, and (ctx, user_data, res, cflags) before 5.16, which passes no
    // request: those kernels' completions are not followed.
    b.raw_complete = match k.raw_tracepoint("io_uring_complete") {
        Some(p) if p.len() == 3 && p[2].ty == "struct io_uring_cqe *" => RAW_COMPLETE_CQE,
        Some(p)
            if matches!(p.len(), 5 | 7)
                && p[1].name.as_deref().is_none_or(|n| n == "req")
                && !p[2].ty.contains('*')
                && !p[3].ty.contains('*') =>
        {
            RAW_COMPLETE_RES
        }
        _ => 0,
    };
    if let Some(flags) = off("file", "f_flags") {
        b.file_flags = flags;
        b.o_sync_bit = u32::try_from(libc::O_SYNC & !libc::O_DSYNC).unwrap_or(0);
    }
    b
}
