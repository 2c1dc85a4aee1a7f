//! Synced writes on ext4, XFS and btrfs: what ends them where the filesystem has no exit
//! tracepoint, and each filesystem's own fsync tracepoint in the writer.

use iotop_bpf_common::{sync::DurableBtf, tracepoint::ABSENT};

use super::{
    Abi, KernelFacts, Part, Plan, Step, SyncSource, SyncSourceKind, Traced, WriteEnd, arg_is, field,
};

/// Writes on `O_SYNC`/`O_DSYNC` files (or with `RWF_DSYNC`) on ext4, XFS and btrfs: each
/// filesystem's fsync tracepoint, which fires inside the write; where it has no exit, the
/// write's own exit (`write_end`) ends it, read with the thread's registers.
pub(super) fn plan(
    k: &KernelFacts,
    raw: bool,
    classic: &Result<(), String>,
    registers: &Result<(), String>,
    write_end: Option<&WriteEnd>,
    plan: &mut Plan,
) {
    let ext4 = ext4(k, raw, classic, registers, plan);
    let entry_only = |name: &str| -> Result<&WriteEnd, String> {
        registers
            .as_ref()
            .map_err(|why| format!("{name} has no exit: {why}"))?;
        write_end.ok_or_else(|| {
            format!("{name} has no exit, and the write system calls' exits are not traced")
        })
    };
    let xfs = entry_only("xfs_file_fsync").and_then(|end| xfs(k, raw, classic, end, plan));
    let btrfs = entry_only("btrfs_sync_file").and_then(|end| btrfs(k, raw, classic, end, plan));
    for (kind, name, fs, status) in [
        (
            SyncSourceKind::SyncedWritesExt4,
            "O_SYNC/O_DSYNC/RWF_DSYNC writes on ext4",
            "ext4",
            ext4,
        ),
        (
            SyncSourceKind::SyncedWritesXfs,
            "O_SYNC/O_DSYNC/RWF_DSYNC writes on XFS",
            "xfs",
            xfs,
        ),
        (
            SyncSourceKind::SyncedWritesBtrfs,
            "O_SYNC/O_DSYNC/RWF_DSYNC writes on btrfs",
            "btrfs",
            btrfs,
        ),
    ] {
        if let Err(why) = &status
            && k.knows_filesystem(fs)
        {
            plan.notes.push(format!("{name}: not traced ({why})"));
        }
        let programs = match &status {
            Ok((programs, _)) => programs.clone(),
            Err(_) => Vec::new(),
        };
        plan.sync_sources.push(SyncSource {
            kind,
            name,
            status: status.map(|(_, how)| how),
            programs,
        });
    }
}

/// The classic write exits, which end synced writes when the raw `sys_exit` is not used.
pub(super) fn classic_write_exits(
    k: &KernelFacts,
    plan: &mut Plan,
    b: &mut DurableBtf,
) -> Option<WriteEnd> {
    let ret = plan.globals.syscalls.ret;
    let names = [
        "sys_exit_write",
        "sys_exit_pwrite64",
        "sys_exit_writev",
        "sys_exit_pwritev",
        "sys_exit_pwritev2",
    ];
    let all = ret != ABSENT
        && names.iter().all(|name| {
            k.event("syscalls", name)
                .is_some_and(|f| field(&f, "ret", 8, 8) == Some(ret))
        });
    if !all {
        return None;
    }
    for name in names {
        plan.steps.push(Step::classic(
            "durable_write_exit",
            "syscalls",
            name,
            Part::SyncedWrites,
        ));
    }
    if b.reads_registers()
        && let Ok(abi) = Abi::of(k)
        && k.event("syscalls", "sys_exit_io_uring_enter")
            .is_some_and(|f| field(&f, "ret", 8, 8) == Some(ret))
    {
        plan.steps.push(
            Step::classic(
                "durable_write_exit",
                "syscalls",
                "sys_exit_io_uring_enter",
                Part::SyncedWrites,
            )
            .deferred(),
        );
        b.uring_enter_nr = abi.io_uring_enter();
    }
    Some(WriteEnd {
        program: "durable_write_exit",
        how: "ended by the write's exit (syscalls:sys_exit_write, pwrite64, writev, pwritev, pwritev2)",
    })
}

fn ext4(
    k: &KernelFacts,
    raw: bool,
    classic: &Result<(), String>,
    registers: &Result<(), String>,
    plan: &mut Plan,
) -> Traced {
    let fd = match registers {
        Ok(()) => "fd from its registers".to_string(),
        Err(why) => format!("fd unknown: {why}"),
    };
    if raw
        && arg_is(k, "ext4_sync_file_enter", 0, "file")
        && arg_is(k, "ext4_sync_file_exit", 0, "inode")
        && plan.globals.files.file_inode != 0
    {
        // The exit first: an entry must never be attached without it.
        plan.steps.push(Step::raw(
            "raw_durable_ext4_exit",
            "ext4_sync_file_exit",
            Part::SyncedWrites,
        ));
        plan.steps.push(
            Step::raw(
                "raw_durable_ext4_enter",
                "ext4_sync_file_enter",
                Part::SyncedWrites,
            )
            .after("raw_durable_ext4_exit"),
        );
        return Ok((
            vec!["raw_durable_ext4_exit", "raw_durable_ext4_enter"],
            format!("raw ext4_sync_file_enter/exit in the writer ({fd})"),
        ));
    }
    classic.clone()?;
    let (Some(enter), Some(exit)) = (
        k.event("ext4", "ext4_sync_file_enter"),
        k.event("ext4", "ext4_sync_file_exit"),
    ) else {
        return Err("no ext4:ext4_sync_file_enter/exit tracepoints".to_string());
    };
    let o = &mut plan.globals.durable;
    match (
        field(&enter, "dev", 4, 4),
        field(&enter, "ino", 8, 8),
        field(&enter, "datasync", 4, 4),
        field(&exit, "ret", 4, 4),
    ) {
        (Some(dev), Some(ino), Some(datasync), Some(ret)) => {
            (o.ext4_dev, o.ext4_ino, o.ext4_datasync, o.ext4_ret) = (dev, ino, datasync, ret);
        }
        _ => return Err("ext4:ext4_sync_file_enter/exit have an unexpected layout".to_string()),
    }
    plan.steps.push(Step::classic(
        "durable_ext4_exit",
        "ext4",
        "ext4_sync_file_exit",
        Part::SyncedWrites,
    ));
    plan.steps.push(
        Step::classic(
            "durable_ext4_enter",
            "ext4",
            "ext4_sync_file_enter",
            Part::SyncedWrites,
        )
        .after("durable_ext4_exit"),
    );
    Ok((
        vec!["durable_ext4_exit", "durable_ext4_enter"],
        format!("ext4:ext4_sync_file_enter/exit in the writer ({fd})"),
    ))
}

fn xfs(
    k: &KernelFacts,
    raw: bool,
    classic: &Result<(), String>,
    end: &WriteEnd,
    plan: &mut Plan,
) -> Traced {
    let vnode = k.offset("xfs_inode", "i_vnode");
    if raw
        && arg_is(k, "xfs_file_fsync", 0, "xfs_inode")
        && let Some(vnode) = vnode
        && plan.globals.files.inode_sb != 0
    {
        plan.globals.raw_layout.xfs_inode_vnode = vnode;
        plan.steps.push(
            Step::raw("raw_durable_xfs", "xfs_file_fsync", Part::SyncedWrites).after(end.program),
        );
        return Ok((
            vec!["raw_durable_xfs", end.program],
            format!("raw xfs_file_fsync in the writer, {}", end.how),
        ));
    }
    let no_raw = if k.raw_tracepoint("xfs_file_fsync").is_some() && vnode.is_none() {
        "no BTF for the xfs module's struct xfs_inode"
    } else {
        "no raw xfs_file_fsync tracepoint"
    };
    classic.clone().map_err(|e| format!("{no_raw}, and {e}"))?;
    let format = k
        .event("xfs", "xfs_file_fsync")
        .ok_or("no xfs:xfs_file_fsync tracepoint")?;
    let (Some(dev), Some(ino)) = (field(&format, "dev", 4, 4), field(&format, "ino", 8, 8)) else {
        return Err("xfs:xfs_file_fsync has an unexpected layout".to_string());
    };
    (plan.globals.durable.xfs_dev, plan.globals.durable.xfs_ino) = (dev, ino);
    plan.steps.push(
        Step::classic("durable_xfs", "xfs", "xfs_file_fsync", Part::SyncedWrites)
            .after(end.program),
    );
    Ok((
        vec!["durable_xfs", end.program],
        format!("xfs:xfs_file_fsync in the writer, {}", end.how),
    ))
}

/// btrfs's fsync tracepoint: `btrfs_sync_file`, split into `btrfs_sync_file_enter` and
/// `_exit` in 7.x (the entry passes the same arguments and fields).
const BTRFS_SYNC: [&str; 2] = ["btrfs_sync_file", "btrfs_sync_file_enter"];

fn btrfs(
    k: &KernelFacts,
    raw: bool,
    classic: &Result<(), String>,
    end: &WriteEnd,
    plan: &mut Plan,
) -> Traced {
    if raw
        && plan.globals.files.file_inode != 0
        && let Some(tracepoint) = BTRFS_SYNC.into_iter().find(|t| arg_is(k, t, 0, "file"))
    {
        plan.steps.push(
            Step::raw("raw_durable_btrfs", tracepoint, Part::SyncedWrites).after(end.program),
        );
        return Ok((
            vec!["raw_durable_btrfs", end.program],
            format!("raw {tracepoint} in the writer, {}", end.how),
        ));
    }
    classic
        .clone()
        .map_err(|e| format!("no raw btrfs_sync_file tracepoint, and {e}"))?;
    let (tracepoint, format) = BTRFS_SYNC
        .into_iter()
        .find_map(|t| Some((t, k.event("btrfs", t)?)))
        .ok_or("no btrfs:btrfs_sync_file tracepoint")?;
    let (Some(ino), Some(datasync)) = (
        field(&format, "ino", 8, 8),
        field(&format, "datasync", 4, 4),
    ) else {
        return Err(format!("btrfs:{tracepoint} has an unexpected layout"));
    };
    (
        plan.globals.durable.btrfs_ino,
        plan.globals.durable.btrfs_datasync,
    ) = (ino, datasync);
    plan.steps.push(
        Step::classic("durable_btrfs", "btrfs", tracepoint, Part::SyncedWrites).after(end.program),
    );
    Ok((
        vec!["durable_btrfs", end.program],
        format!("btrfs:{tracepoint} in the writer, {}", end.how),
    ))
}
