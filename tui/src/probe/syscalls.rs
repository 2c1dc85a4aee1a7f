//! Which syscall tracepoints the sync and write probes use, and where their arguments are.

use anyhow::Result;
use iotop_bpf_common::{sync::SyscallOffsets, tracepoint::ABSENT};

use super::tracefs::{EventFormat, Tracefs};

/// (program, tracepoint in `syscalls:`, arguments it reads).
const ATTACHMENTS: &[(&str, &str, &[&str])] = &[
    ("sync_enter_fsync", "sys_enter_fsync", &["fd"]),
    ("sync_enter_fdatasync", "sys_enter_fdatasync", &["fd"]),
    (
        "sync_enter_sync_file_range",
        "sys_enter_sync_file_range",
        &["fd"],
    ),
    ("sync_enter_syncfs", "sys_enter_syncfs", &["fd"]),
    ("sync_enter_sync", "sys_enter_sync", &[]),
    ("sync_enter_msync", "sys_enter_msync", &["flags"]),
    ("sync_exit", "sys_exit_fsync", &["ret"]),
    ("sync_exit", "sys_exit_fdatasync", &["ret"]),
    ("sync_exit", "sys_exit_sync_file_range", &["ret"]),
    ("sync_exit", "sys_exit_syncfs", &["ret"]),
    ("sync_exit", "sys_exit_sync", &["ret"]),
    ("sync_exit", "sys_exit_msync", &["ret"]),
    ("write_enter", "sys_enter_write", &["fd", "count"]),
    ("write_enter", "sys_enter_pwrite64", &["fd", "count"]),
    ("writev_enter", "sys_enter_writev", &["fd", "vec", "vlen"]),
    ("writev_enter", "sys_enter_pwritev", &["fd", "vec", "vlen"]),
    ("writev_enter", "sys_enter_pwritev2", &["fd", "vec", "vlen"]),
];

pub struct SyscallPlan {
    pub offsets: SyscallOffsets,
    /// (program, tracepoint name) pairs, all in the `syscalls` category.
    pub attach: Vec<(&'static str, &'static str)>,
    pub degraded: Vec<String>,
}

fn slot<'a>(offsets: &'a mut SyscallOffsets, name: &str) -> Option<&'a mut u32> {
    Some(match name {
        "fd" => &mut offsets.fd,
        "count" => &mut offsets.count,
        "vec" => &mut offsets.vec,
        "vlen" => &mut offsets.vlen,
        "flags" => &mut offsets.flags,
        "ret" => &mut offsets.ret,
        _ => return None,
    })
}

/// Every argument is one 8-byte slot, at the same offset in every syscall tracepoint of a
/// kernel; the first tracepoint that has an argument fixes its offset, and a tracepoint that
/// disagrees is left out (with a note) rather than read wrongly.
pub fn plan(tracefs: &Tracefs) -> Result<SyscallPlan> {
    let mut offsets = SyscallOffsets::ABSENT;
    let mut attach = Vec::new();
    let mut degraded = Vec::new();
    let mut missing = Vec::new();
    for &(program, tracepoint, args) in ATTACHMENTS {
        let Some(format) = tracefs.format("syscalls", tracepoint)? else {
            missing.push(tracepoint);
            continue;
        };
        if fits(&format, args, &mut offsets) {
            attach.push((program, tracepoint));
        } else {
            degraded.push(format!(
                "syscalls:{tracepoint} has an unexpected layout; not traced"
            ));
        }
    }
    if missing.len() == ATTACHMENTS.len() {
        degraded.push(
            "no syscall tracepoints (CONFIG_FTRACE_SYSCALLS off): sync latency and logical writes are not measured"
                .to_string(),
        );
    } else if !missing.is_empty() {
        degraded.push(format!(
            "missing syscall tracepoints, not traced: {}",
            missing.join(", ")
        ));
    }
    Ok(SyscallPlan {
        offsets,
        attach,
        degraded,
    })
}

fn fits(format: &EventFormat, args: &[&str], offsets: &mut SyscallOffsets) -> bool {
    let mut proposed = *offsets;
    for &arg in args {
        let Some(field) = format.field(arg) else {
            return false;
        };
        if field.size != 8 {
            return false;
        }
        let Some(slot) = slot(&mut proposed, arg) else {
            return false;
        };
        if *slot != ABSENT && *slot != field.offset {
            return false;
        }
        *slot = field.offset;
    }
    *offsets = proposed;
    true
}

#[cfg(test)]
mod tests {
    use super::{super::tracefs::parse_format, *};

    #[test]
    fn offsets_come_from_the_formats() {
        let fsync = parse_format(
            &std::fs::read_to_string(format!(
                "{}/tests/data/tracefs/6.18/sys_enter_fsync.format",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap(),
        )
        .unwrap();
        let mut offsets = SyscallOffsets::ABSENT;
        assert!(fits(&fsync, &["fd"], &mut offsets));
        assert_eq!(offsets.fd, 16);
        // A tracepoint that puts fd elsewhere is refused and leaves the offsets alone.
        let mut moved = fsync.clone();
        moved
            .fields
            .iter_mut()
            .find(|f| f.name == "fd")
            .unwrap()
            .offset = 24;
        assert!(!fits(&moved, &["fd"], &mut offsets));
        assert_eq!(offsets.fd, 16);
        assert!(
            !fits(&fsync, &["count"], &mut offsets),
            "fsync has no count"
        );
    }
}
