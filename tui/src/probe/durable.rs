//! Every way a process makes data durable, and which of them this kernel lets the probes see:
//! the sync system calls (planned in `syscalls.rs`), writes on `O_SYNC`/`O_DSYNC` files (the
//! filesystems' own fsync tracepoints, which fire inside the write), io_uring's fsync and
//! sync_file_range (its punt and completion tracepoints), and FUA writes (block request
//! flags). `iotop-bpf check` lists each with how it is traced or why it is not.

use anyhow::Result;
use iotop_bpf_common::{
    sync::{DurableBtf, DurableOffsets, RAW_COMPLETE_CQE, RAW_COMPLETE_RES, SyscallOffsets},
    tracepoint::{ABSENT, WINDOW_LEN, WINDOW_START},
};

use super::{
    btf::Btf,
    tracefs::{EventFormat, Tracefs},
};

/// One way to make data durable, and how it is traced here or why it is not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncSource {
    pub name: &'static str,
    /// `Ok(how)` when traced, `Err(why not)` otherwise.
    pub status: Result<String, String>,
}

pub struct DurablePlan {
    pub offsets: DurableOffsets,
    pub btf: DurableBtf,
    /// Classic tracepoints: (program, category, tracepoint).
    pub attach: Vec<(&'static str, &'static str, &'static str)>,
    /// Raw tracepoints: (program, tracepoint). Attached before [`Self::attach`].
    pub raw_attach: Vec<(&'static str, &'static str)>,
    pub sources: Vec<SyncSource>,
    /// Notes for sources a process here could use but that are not traced.
    pub degraded: Vec<String>,
}

impl DurablePlan {
    /// The program that ends what `program` begins: it is attached first, and `program`
    /// only if it was.
    pub fn ended_by(&self, program: &str) -> Option<&'static str> {
        match program {
            "durable_ext4_enter" => Some("durable_ext4_exit"),
            "durable_xfs" | "durable_btrfs" => Some("durable_write_exit"),
            "uring_punt" if self.btf.raw_complete != 0 => Some("raw_uring_complete"),
            "uring_punt" => Some("uring_complete"),
            _ => None,
        }
    }
}

/// The write system calls whose exit ends a synced write, with their numbers on this
/// architecture (the probe recognises the write it is in by its number).
#[cfg(target_arch = "x86_64")]
const WRITE_SYSCALLS: [(&str, i64); 5] = [
    ("sys_exit_write", libc::SYS_write),
    ("sys_exit_pwrite64", libc::SYS_pwrite64),
    ("sys_exit_writev", libc::SYS_writev),
    ("sys_exit_pwritev", libc::SYS_pwritev),
    ("sys_exit_pwritev2", libc::SYS_pwritev2),
];

/// Where the offsets come from: tracefs `format` files.
pub trait Formats {
    fn format(&self, category: &str, name: &str) -> Result<Option<EventFormat>>;
}

impl Formats for Tracefs {
    fn format(&self, category: &str, name: &str) -> Result<Option<EventFormat>> {
        Ok(Tracefs::format(self, category, name)?)
    }
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

/// Plans the probes. `syscalls` are the syscall offsets already planned (the write exits
/// read `ret` where every `sys_exit_*` has it), `sync_syscalls` the sync system calls
/// attached, `filesystems` the contents of `/proc/filesystems`.
pub fn plan(
    formats: &impl Formats,
    btf: Result<&Btf, &String>,
    kernel: (u32, u32),
    syscalls: &SyscallOffsets,
    sync_syscalls: &[&str],
    filesystems: &str,
) -> Result<DurablePlan> {
    let mut o = DurableOffsets::ABSENT;
    let mut attach = Vec::new();
    let mut raw_attach = Vec::new();
    let mut sources = Vec::new();
    let mut degraded = Vec::new();
    let available = |fs: &str| {
        filesystems
            .lines()
            .any(|l| l.split_whitespace().last() == Some(fs))
    };

    sources.push(SyncSource {
        name: "fsync, fdatasync, sync_file_range, syncfs, sync, msync(MS_SYNC)",
        status: if sync_syscalls.is_empty() {
            Err("no syscall tracepoints".to_string())
        } else {
            Ok(format!(
                "syscalls:{} (entry and exit)",
                sync_syscalls.join(", ")
            ))
        },
    });

    let mut b = durable_btf(btf, kernel);
    let registers = if b.reads_registers() {
        Ok(())
    } else {
        Err(match btf {
            Err(e) => format!("{e}: the write that synced cannot be recognised"),
            Ok(_) if kernel < (5, 15) => {
                "kernel < 5.15 (no bpf_task_pt_regs): the write that synced cannot be recognised"
                    .to_string()
            }
            Ok(_) => "this architecture's registers are not known to iotop-bpf".to_string(),
        })
    };

    // The write exits, which end a synced write on filesystems without an exit tracepoint.
    let mut write_exits = Vec::new();
    let mut ret = syscalls.ret;
    #[cfg(target_arch = "x86_64")]
    for (name, _) in WRITE_SYSCALLS {
        if let Some(format) = formats.format("syscalls", name)?
            && let Some(offset) = field(&format, "ret", 8, 8)
            && (ret == ABSENT || ret == offset)
        {
            ret = offset;
            write_exits.push(name);
        }
    }
    let writes_end = write_exits.len() == 5 && ret == syscalls.ret;
    // io_uring_enter's exit ends the synced writes io_uring runs inline.
    #[cfg(target_arch = "x86_64")]
    let uring_enter_exit = writes_end
        && b.reads_registers()
        && formats
            .format("syscalls", "sys_exit_io_uring_enter")?
            .is_some_and(|format| field(&format, "ret", 8, 8) == Some(ret));
    #[cfg(not(target_arch = "x86_64"))]
    let uring_enter_exit = false;

    // ext4: entry and exit.
    let ext4 = match (
        formats.format("ext4", "ext4_sync_file_enter")?,
        formats.format("ext4", "ext4_sync_file_exit")?,
    ) {
        (Some(enter), Some(exit)) => match (
            field(&enter, "dev", 4, 4),
            field(&enter, "ino", 8, 8),
            field(&enter, "datasync", 4, 4),
            field(&exit, "ret", 4, 4),
        ) {
            (Some(dev), Some(ino), Some(datasync), Some(ret)) => {
                (o.ext4_dev, o.ext4_ino, o.ext4_datasync, o.ext4_ret) = (dev, ino, datasync, ret);
                // The exit first: an entry must never be attached without it.
                attach.push(("durable_ext4_exit", "ext4", "ext4_sync_file_exit"));
                attach.push(("durable_ext4_enter", "ext4", "ext4_sync_file_enter"));
                Ok(match &registers {
                    Ok(()) => {
                        "ext4:ext4_sync_file_enter/exit in the writer (fd from its registers)"
                            .to_string()
                    }
                    Err(why) => {
                        format!("ext4:ext4_sync_file_enter/exit in the writer (fd unknown: {why})")
                    }
                })
            }
            _ => Err("ext4:ext4_sync_file_enter/exit have an unexpected layout".to_string()),
        },
        _ => Err("no ext4:ext4_sync_file_enter/exit tracepoints".to_string()),
    };
    // Entry-only filesystems: the write's own exit ends the sync.
    let entry_only = |found: Option<EventFormat>,
                      tracepoint: &str|
     -> Result<EventFormat, String> {
        let format = found.ok_or_else(|| format!("no {tracepoint} tracepoint"))?;
        registers
            .as_ref()
            .map_err(|why| format!("{tracepoint} has no exit: {why}"))?;
        if !writes_end {
            return Err(format!(
                "{tracepoint} has no exit, and the write system calls' exit tracepoints are missing"
            ));
        }
        Ok(format)
    };
    let xfs = entry_only(formats.format("xfs", "xfs_file_fsync")?, "xfs:xfs_file_fsync")
        .and_then(
            |format| match (field(&format, "dev", 4, 4), field(&format, "ino", 8, 8)) {
                (Some(dev), Some(ino)) => {
                    (o.xfs_dev, o.xfs_ino) = (dev, ino);
                    attach.push(("durable_xfs", "xfs", "xfs_file_fsync"));
                    Ok("xfs:xfs_file_fsync in the writer, ended by the write's exit (syscalls:sys_exit_write, pwrite64, writev, pwritev, pwritev2)".to_string())
                }
                _ => Err("xfs:xfs_file_fsync has an unexpected layout".to_string()),
            },
        );
    let btrfs = entry_only(
        formats.format("btrfs", "btrfs_sync_file")?,
        "btrfs:btrfs_sync_file",
    )
    .and_then(|format| {
        match (
            field(&format, "ino", 8, 8),
            field(&format, "datasync", 4, 4),
        ) {
            (Some(ino), Some(datasync)) => {
                (o.btrfs_ino, o.btrfs_datasync) = (ino, datasync);
                attach.push(("durable_btrfs", "btrfs", "btrfs_sync_file"));
                Ok("btrfs:btrfs_sync_file in the writer, ended by the write's exit".to_string())
            }
            _ => Err("btrfs:btrfs_sync_file has an unexpected layout".to_string()),
        }
    });
    let any_fs = [&ext4, &xfs, &btrfs].iter().any(|s| s.is_ok());
    if any_fs && writes_end {
        // Before the entries they end.
        let entries = std::mem::take(&mut attach);
        for name in &write_exits {
            attach.push(("durable_write_exit", "syscalls", name));
        }
        #[cfg(target_arch = "x86_64")]
        if uring_enter_exit {
            attach.push(("durable_write_exit", "syscalls", "sys_exit_io_uring_enter"));
            b.uring_enter_nr = u32::try_from(libc::SYS_io_uring_enter).unwrap_or(u32::MAX);
        }
        attach.extend(entries);
    }
    for (name, fs, status) in [
        ("O_SYNC/O_DSYNC/RWF_DSYNC writes on ext4", "ext4", ext4),
        ("O_SYNC/O_DSYNC/RWF_DSYNC writes on XFS", "xfs", xfs),
        ("O_SYNC/O_DSYNC/RWF_DSYNC writes on btrfs", "btrfs", btrfs),
    ] {
        if let Err(why) = &status
            && available(fs)
        {
            degraded.push(format!("{name}: not traced ({why})"));
        }
        sources.push(SyncSource { name, status });
    }

    // io_uring: the punt to io-wq and the completion.
    let uring = match (
        formats.format("io_uring", "io_uring_queue_async_work")?,
        formats.format("io_uring", "io_uring_complete")?,
    ) {
        (Some(punt), Some(complete)) => match (
            field(&punt, "req", 8, 8),
            field(&punt, "opcode", 1, 8),
            field(&complete, "req", 8, 8),
            field(&complete, "res", 4, 4),
        ) {
            (Some(req), Some(opcode), Some(done_req), Some(res)) => {
                (o.punt_req, o.punt_opcode, o.complete_req, o.complete_res) =
                    (req, opcode, done_req, res);
                // The completion runs on every io_uring completion of the host: raw where BTF
                // says what it passes (no trace record built for it).
                let complete = if b.raw_complete != 0 {
                    raw_attach.push(("raw_uring_complete", "io_uring_complete"));
                    "io_uring_complete (raw)"
                } else {
                    attach.push(("uring_complete", "io_uring", "io_uring_complete"));
                    "io_uring_complete"
                };
                attach.push(("uring_punt", "io_uring", "io_uring_queue_async_work"));
                Ok(if b.finds_workers() {
                    format!(
                        "io_uring:io_uring_queue_async_work to {complete}; the io-wq worker's writes are the sync's own"
                    )
                } else {
                    format!(
                        "io_uring:io_uring_queue_async_work to {complete} (io-wq workers not recognised: no kernel BTF for io_worker/io_kiocb; their writes are not counted as the sync's own)"
                    )
                })
            }
            _ => Err("the io_uring tracepoints have an unexpected layout".to_string()),
        },
        _ => Err("no io_uring:io_uring_queue_async_work/io_uring_complete tracepoints".to_string()),
    };
    if let Err(why) = &uring {
        degraded.push(format!(
            "io_uring IORING_OP_FSYNC/SYNC_FILE_RANGE: not traced ({why})"
        ));
    }
    let inline = if b.uring_enter_nr == u32::MAX {
        "inline ones not followed (no syscalls:sys_exit_io_uring_enter, registers or write exits)"
    } else {
        "inline ones from the filesystem's tracepoint in io_uring_enter to the next one or the call's exit"
    };
    let uring_writes = match &uring {
        Ok(_) if b.finds_workers() => Ok(format!(
            "punted ones from the filesystem's tracepoint in the io-wq worker to io_uring_complete; {inline}"
        )),
        Ok(_) => {
            Err("io-wq workers not recognised (no kernel BTF for io_worker/io_kiocb)".to_string())
        }
        Err(why) => Err(why.clone()),
    };
    sources.push(SyncSource {
        name: "io_uring IORING_OP_FSYNC (fdatasync too), IORING_OP_SYNC_FILE_RANGE",
        status: uring,
    });
    sources.push(SyncSource {
        name: "io_uring writes on O_SYNC/O_DSYNC files or with RWF_DSYNC",
        status: uring_writes,
    });
    sources.push(SyncSource {
        name: "FUA writes",
        status: Ok(
            "the requests' FUA flag, per process; disks say whether they honour it (sysfs queue/fua)"
                .to_string(),
        ),
    });
    Ok(DurablePlan {
        offsets: o,
        btf: b,
        attach,
        raw_attach,
        sources,
        degraded,
    })
}

/// The kernel-object offsets the probes read, from BTF; what is missing switches its use off.
fn durable_btf(btf: Result<&Btf, &String>, kernel: (u32, u32)) -> DurableBtf {
    let mut b = DurableBtf::ABSENT;
    let Ok(btf) = btf else { return b };
    let off = |s: &str, m: &str| btf.member_offset(s, m).ok();
    #[cfg(target_arch = "x86_64")]
    if kernel >= (5, 15)
        && let (Some(arg0), Some(nr)) = (off("pt_regs", "di"), off("pt_regs", "orig_ax"))
    {
        b.use_regs = 1;
        b.regs_arg0 = arg0;
        b.regs_nr = nr;
        for (slot, (_, nr)) in b.write_nrs.iter_mut().zip(WRITE_SYSCALLS) {
            *slot = u32::try_from(nr).unwrap_or(u32::MAX);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernel;
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
    // extra2]) before. Kernels whose completion does not pass the request are not followed.
    let complete = "io_uring_complete";
    b.raw_complete = match (
        btf.raw_tracepoint_arg_count(complete),
        btf.raw_tracepoint_arg_struct(complete, 2).as_deref(),
    ) {
        (Ok(3), Ok("io_uring_cqe")) => RAW_COMPLETE_CQE,
        // user_data, then res: integers.
        (Ok(5 | 7), Err(_)) if btf.raw_tracepoint_arg_struct(complete, 3).is_err() => {
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{super::tracefs::parse_format, *};

    /// Formats from the 6.18 fixtures, by tracepoint name.
    struct Fixtures(HashMap<&'static str, EventFormat>);

    impl Fixtures {
        fn all() -> Self {
            let mut map = HashMap::new();
            for name in [
                "ext4_sync_file_enter",
                "ext4_sync_file_exit",
                "xfs_file_fsync",
                "btrfs_sync_file",
                "io_uring_queue_async_work",
                "io_uring_complete",
                "sys_exit_write",
            ] {
                let text = std::fs::read_to_string(format!(
                    "{}/tests/data/tracefs/6.18/{name}.format",
                    env!("CARGO_MANIFEST_DIR")
                ))
                .unwrap();
                map.insert(name, parse_format(&text).unwrap());
            }
            Self(map)
        }
    }

    impl Formats for Fixtures {
        fn format(&self, _category: &str, name: &str) -> Result<Option<EventFormat>> {
            // Every sys_exit_* has the layout of sys_exit_write.
            let name = if name.starts_with("sys_exit_") {
                "sys_exit_write"
            } else {
                name
            };
            Ok(self.0.get(name).cloned())
        }
    }

    fn syscalls() -> SyscallOffsets {
        SyscallOffsets {
            ret: 16,
            ..SyscallOffsets::ABSENT
        }
    }

    #[test]
    fn offsets_come_from_the_formats() {
        let err = "no BTF".to_string();
        let plan = plan(
            &Fixtures::all(),
            Err(&err),
            (6, 18),
            &syscalls(),
            &["sys_enter_fsync"],
            "\text4\n\txfs\n",
        )
        .unwrap();
        let o = plan.offsets;
        assert_eq!(
            (o.ext4_dev, o.ext4_ino, o.ext4_datasync, o.ext4_ret),
            (8, 16, 32, 24)
        );
        assert_eq!((o.punt_req, o.punt_opcode), (16, 32));
        assert_eq!((o.complete_req, o.complete_res), (16, 32));
        // Without BTF the writer's registers are unknown: ext4 (which has an exit) is still
        // traced, XFS (which has none) is not, and says why.
        let status = |name: &str| {
            plan.sources
                .iter()
                .find(|s| s.name.contains(name))
                .unwrap()
                .status
                .clone()
        };
        assert!(status("on ext4").is_ok());
        let xfs = status("on XFS").unwrap_err();
        assert!(xfs.contains("no BTF"), "{xfs}");
        assert!(
            plan.degraded.iter().any(|d| d.contains("XFS")),
            "XFS is available here: its gap is a degraded note"
        );
        assert!(
            !plan.degraded.iter().any(|d| d.contains("btrfs")),
            "btrfs is not: no note"
        );
        assert!(status("io_uring").is_ok());
        assert!(
            plan.attach
                .iter()
                .any(|(program, ..)| *program == "uring_complete")
        );
    }

    #[test]
    fn missing_tracepoints_are_named() {
        let mut fixtures = Fixtures::all();
        fixtures.0.remove("io_uring_complete");
        fixtures.0.remove("ext4_sync_file_exit");
        let err = "no BTF".to_string();
        let plan = plan(&fixtures, Err(&err), (6, 18), &syscalls(), &[], "\text4\n").unwrap();
        assert!(plan.attach.is_empty(), "{:?}", plan.attach);
        assert!(
            plan.sources
                .iter()
                .all(|s| s.status.is_err() || s.name == "FUA writes")
        );
        assert!(
            plan.degraded
                .iter()
                .any(|d| d.contains("io_uring") && d.contains("io_uring_complete"))
        );
    }

    #[test]
    fn this_kernels_btf_recognises_writers_and_workers() {
        let Some(btf) =
            super::super::btf::tests::kernel_btf("this_kernels_btf_recognises_writers_and_workers")
        else {
            return;
        };
        let b = durable_btf(Ok(&btf), (6, 18));
        assert!(b.finds_workers(), "{b:?}");
        assert_eq!(
            b.raw_complete, RAW_COMPLETE_CQE,
            "6.18: io_uring_complete(ctx, req, cqe)"
        );
        assert_eq!(b.req_file, 0, "io_kiocb starts with the file");
        assert!(b.req_sync_flags != ABSENT && b.file_flags != ABSENT);
        #[cfg(target_arch = "x86_64")]
        {
            assert!(b.reads_registers());
            assert_eq!(b.write_nrs, [1, 18, 20, 296, 328]);
        }
    }
}
