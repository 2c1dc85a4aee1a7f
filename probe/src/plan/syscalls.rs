//! The system-call probes: sync calls and written bytes. On trampolines at the followed
//! calls' entry functions where the kernel has them safe, so that no other system call runs
//! a program; on raw `sys_enter`/`sys_exit` (one program each, dispatched by number) where
//! it has not, or refuses one; on the classic per-call tracepoints without BTF.

use iotop_bpf_common::{
    raw::{REGS_WINDOW_LEN, SYSCALL_WRITE, SYSCALL_WRITEV},
    sync::{
        SYNC_FDATASYNC, SYNC_FILE_RANGE, SYNC_FSYNC, SYNC_MSYNC, SYNC_SYNC, SYNC_SYNCFS,
        SyscallOffsets,
    },
    tracepoint::ABSENT,
};

use super::{KernelFacts, Part, Plan, Step, TRAMPOLINES, arg_is};
use crate::tracefs::EventFormat;

/// One followed call's trampolines: (fentry program, fexit program, the entry functions
/// to look for on x86-64, on arm64). A call without arguments (`sync`) has on x86-64 only
/// the `__do_sys_` function in BTF: its `__x64_sys_` is an alias.
macro_rules! trampolined {
    ($entry:expr, $exit:literal, $call:literal) => {
        (
            $entry,
            $exit,
            [concat!("__x64_sys_", $call), concat!("__do_sys_", $call)],
            [concat!("__arm64_sys_", $call), concat!("__do_sys_", $call)],
        )
    };
}

/// Every followed call's; `io_uring_enter` only ends the writes it ran inline with `O_DSYNC`.
type Trampolined = (
    Option<&'static str>,
    &'static str,
    [&'static str; 2],
    [&'static str; 2],
);
const TRAMPOLINED: [Trampolined; 12] = [
    trampolined!(Some("fentry_fsync"), "fexit_fsync", "fsync"),
    trampolined!(Some("fentry_fdatasync"), "fexit_fdatasync", "fdatasync"),
    trampolined!(
        Some("fentry_sync_file_range"),
        "fexit_sync_file_range",
        "sync_file_range"
    ),
    trampolined!(Some("fentry_syncfs"), "fexit_syncfs", "syncfs"),
    trampolined!(Some("fentry_sync"), "fexit_sync", "sync"),
    trampolined!(Some("fentry_msync"), "fexit_msync", "msync"),
    trampolined!(Some("fentry_write"), "fexit_write", "write"),
    trampolined!(Some("fentry_pwrite64"), "fexit_pwrite64", "pwrite64"),
    trampolined!(Some("fentry_writev"), "fexit_writev", "writev"),
    trampolined!(Some("fentry_pwritev"), "fexit_pwritev", "pwritev"),
    trampolined!(Some("fentry_pwritev2"), "fexit_pwritev2", "pwritev2"),
    trampolined!(None, "fexit_io_uring_enter", "io_uring_enter"),
];

/// The system calls the probes follow, and what `sys_enter` does for each.
const FOLLOWED: [(&str, u8); 11] = [
    ("fsync", SYNC_FSYNC),
    ("fdatasync", SYNC_FDATASYNC),
    ("sync_file_range", SYNC_FILE_RANGE),
    ("syncfs", SYNC_SYNCFS),
    ("sync", SYNC_SYNC),
    ("msync", SYNC_MSYNC),
    ("write", SYSCALL_WRITE),
    ("pwrite64", SYSCALL_WRITE),
    ("writev", SYSCALL_WRITEV),
    ("pwritev", SYSCALL_WRITEV),
    ("pwritev2", SYSCALL_WRITEV),
];

/// A kernel's system-call ABI, told by its `struct pt_regs` in BTF (not by the machine the
/// plan is made on: the plan's tests run every kernel's facts on either architecture).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abi {
    X86_64,
    Aarch64,
}

impl Abi {
    /// The kernel's ABI: x86-64 saves `di`, arm64 `regs[]`.
    pub fn of(k: &KernelFacts) -> Result<Self, String> {
        if k.member("pt_regs", "di").is_some() {
            Ok(Self::X86_64)
        } else if k.member("pt_regs", "regs").is_some() {
            Ok(Self::Aarch64)
        } else {
            Err("the kernel's struct pt_regs is neither x86-64's nor arm64's".to_string())
        }
    }

    /// The numbers of [`FOLLOWED`], in its order: the kernel's uapi
    /// (`arch/x86/entry/syscalls/syscall_64.tbl`, `include/uapi/asm-generic/unistd.h`),
    /// checked against libc's for the architecture the tests run on.
    const fn numbers(self) -> [u32; 11] {
        match self {
            Self::X86_64 => [74, 75, 277, 306, 162, 26, 1, 18, 20, 296, 328],
            Self::Aarch64 => [82, 83, 84, 267, 81, 227, 64, 68, 66, 70, 287],
        }
    }

    /// The followed calls with their numbers and what `sys_enter` does for each.
    pub fn calls(self) -> impl Iterator<Item = (&'static str, u32, u8)> {
        FOLLOWED
            .into_iter()
            .zip(self.numbers())
            .map(|((name, action), nr)| (name, nr, action))
    }

    /// `io_uring_enter`'s number (the same on both, from the table every architecture
    /// shares since 5.1).
    pub const fn io_uring_enter(self) -> u32 {
        426
    }

    /// Where the first four arguments of a call are in `struct pt_regs` at its entry.
    fn arguments(self, k: &KernelFacts) -> Result<[u32; 4], String> {
        match self {
            Self::X86_64 => {
                let mut offsets = [0u32; 4];
                for (slot, r) in offsets.iter_mut().zip(["di", "si", "dx", "r10"]) {
                    *slot = k
                        .offset("pt_regs", r)
                        .ok_or(format!("no pt_regs.{r} in the kernel's BTF"))?;
                }
                Ok(offsets)
            }
            Self::Aarch64 => {
                let regs = k
                    .member("pt_regs", "regs")
                    .filter(|m| m.size >= 4 * 8)
                    .ok_or("no pt_regs.regs[] of 4 registers or more in the kernel's BTF")?;
                Ok([0, 8, 16, 24].map(|r| regs.offset() + r))
            }
        }
    }

    /// Where the thread's current call is in its saved registers, during the call: its
    /// first argument as it began (arm64 returns in x0, so `orig_x0`), and its number, with
    /// that number's size (arm64's `syscallno` is an s32, x86-64's `orig_ax` a long; the
    /// probes read its first four bytes, the number's on a little-endian machine).
    pub fn current_call(self, k: &KernelFacts) -> Option<(u32, u32)> {
        let (arg0, nr) = match self {
            Self::X86_64 => ("di", "orig_ax"),
            Self::Aarch64 => ("orig_x0", "syscallno"),
        };
        let arg0 = k.member("pt_regs", arg0).filter(|m| m.size == 8)?;
        let nr = k
            .member("pt_regs", nr)
            .filter(|m| m.size == 4 || m.size == 8)?;
        Some((arg0.offset(), nr.offset()))
    }
}

/// The names of the sync system calls the probes see, for `check`.
pub fn sync_calls() -> String {
    FOLLOWED
        .iter()
        .filter(|(_, action)| *action < SYSCALL_WRITE)
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn plan(k: &KernelFacts, raw: bool, classic: &Result<(), String>, plan: &mut Plan) {
    let why_not_raw = if raw {
        match self::raw(k, plan) {
            Ok(abi) => {
                plan.syscall_path = match trampolines(k, abi, plan) {
                    Ok(()) => "trampolines on the followed calls' entry functions (fentry/fexit): the host's other system calls run nothing".to_string(),
                    Err(why) => {
                        format!("raw sys_enter/sys_exit, {}: {why}", Part::Trampolines.loss())
                    }
                };
                raw_steps(plan);
                return;
            }
            Err(why) => why,
        }
    } else {
        String::new()
    };
    match classic {
        Ok(()) => {
            plan.syscall_path =
                format!("the classic syscalls tracepoints of the followed calls: {why_not_raw}");
            self::classic(k, plan);
        }
        Err(no_classic) => {
            let why = if why_not_raw.is_empty() {
                no_classic.clone()
            } else {
                format!("{why_not_raw}; {no_classic}")
            };
            plan.syscall_path = format!("none: {why}");
            plan.notes.push(format!(
                "{} and {}: {why}",
                Part::SyncCalls.loss(),
                Part::LogicalWrites.loss()
            ));
        }
    }
}

/// The trampolines, where the kernel has them safe: each followed call's entry function
/// takes the saved user registers (`const struct pt_regs *`, as `sys_enter` does), and a
/// trampoline is kept while a task sleeps in its function (`bpf_tramp_image.pcref`, 5.12:
/// before it, detaching fexit from a sleeping fsync could return into freed code). The raw
/// steps stay planned as their twin, for a kernel that refuses one.
fn trampolines(k: &KernelFacts, abi: Abi, plan: &mut Plan) -> Result<(), String> {
    if k.member("bpf_tramp_image", "pcref").is_none() {
        return Err(
            "its trampolines are unsafe over sleeping calls (no bpf_tramp_image.pcref in BTF)"
                .to_string(),
        );
    }
    let mut steps = Vec::new();
    for (entry, exit, x86_64, aarch64) in TRAMPOLINED {
        let names = match abi {
            Abi::X86_64 => x86_64,
            Abi::Aarch64 => aarch64,
        };
        let takes_regs = |function: &&str| {
            k.function(function).is_some_and(|params| {
                params.len() == 1
                    && matches!(
                        params[0].ty.as_str(),
                        "const struct pt_regs *" | "struct pt_regs *"
                    )
            })
        };
        let Some(function) = names.into_iter().find(takes_regs) else {
            return Err(format!(
                "no {}(const struct pt_regs *) in its BTF",
                names[0]
            ));
        };
        // The exit first: a call must never be begun where nothing would end it.
        steps.push(Step::exit(exit, function, Part::Trampolines));
        if let Some(entry) = entry {
            steps.push(Step::entry(entry, function, Part::Trampolines).after(exit));
        }
    }
    plan.steps.extend(steps);
    Ok(())
}

/// The raw probes' layout: arguments read from the saved user registers, at BTF offsets
/// (the trampolines read them the same way).
fn raw(k: &KernelFacts, plan: &mut Plan) -> Result<Abi, String> {
    for tracepoint in ["sys_enter", "sys_exit"] {
        if !arg_is(k, tracepoint, 0, "pt_regs") {
            return Err(format!(
                "no raw {tracepoint}(struct pt_regs *, long) tracepoint"
            ));
        }
    }
    let abi = Abi::of(k)?;
    let offsets = abi.arguments(k)?;
    let window = offsets.iter().min().copied().unwrap_or(0) / 8 * 8;
    if offsets
        .iter()
        .any(|&o| o + 8 > window + REGS_WINDOW_LEN as u32 || o % 8 != 0)
    {
        return Err("struct pt_regs keeps the arguments further apart than the probes read".into());
    }
    let l = &mut plan.globals.raw_layout;
    l.regs_window = window;
    l.regs_args = offsets.map(|o| o - window);
    for (_, nr, action) in abi.calls() {
        if let Some(slot) = plan.globals.syscall_table.get_mut(nr as usize) {
            *slot = action;
        }
    }
    Ok(abi)
}

/// The raw steps, after the trampolines if any: then only in their stead.
fn raw_steps(plan: &mut Plan) {
    let twin = |step: Step, trampolines: bool| {
        if trampolines {
            step.instead_of(TRAMPOLINES)
        } else {
            step
        }
    };
    let trampolines = plan.steps.iter().any(Step::is_trampoline);
    // The exit first: a call must never be begun where nothing would end it.
    plan.steps.push(twin(
        Step::raw("raw_sys_exit", "sys_exit", Part::SyncCalls),
        trampolines,
    ));
    plan.steps.push(twin(
        Step::raw("raw_sys_enter", "sys_enter", Part::SyncCalls).after("raw_sys_exit"),
        trampolines,
    ));
}

/// (program, tracepoint in `syscalls:`, arguments it reads).
const CLASSIC: &[(&str, &str, &[&str])] = &[
    ("sync_exit", "sys_exit_fsync", &["ret"]),
    ("sync_exit", "sys_exit_fdatasync", &["ret"]),
    ("sync_exit", "sys_exit_sync_file_range", &["ret"]),
    ("sync_exit", "sys_exit_syncfs", &["ret"]),
    ("sync_exit", "sys_exit_sync", &["ret"]),
    ("sync_exit", "sys_exit_msync", &["ret"]),
    ("sync_enter_fsync", "sys_enter_fsync", &["fd"]),
    ("sync_enter_fdatasync", "sys_enter_fdatasync", &["fd"]),
    (
        "sync_enter_sync_file_range",
        "sys_enter_sync_file_range",
        &["fd", "flags@range"],
    ),
    ("sync_enter_syncfs", "sys_enter_syncfs", &["fd"]),
    ("sync_enter_sync", "sys_enter_sync", &[]),
    ("sync_enter_msync", "sys_enter_msync", &["start", "flags"]),
    ("write_enter", "sys_enter_write", &["fd", "count"]),
    ("write_enter", "sys_enter_pwrite64", &["fd", "count"]),
    ("writev_enter", "sys_enter_writev", &["fd", "vec", "vlen"]),
    ("writev_enter", "sys_enter_pwritev", &["fd", "vec", "vlen"]),
    ("writev_enter", "sys_enter_pwritev2", &["fd", "vec", "vlen"]),
];

fn slot<'a>(offsets: &'a mut SyscallOffsets, name: &str) -> Option<&'a mut u32> {
    Some(match name {
        "fd" => &mut offsets.fd,
        "count" => &mut offsets.count,
        "vec" => &mut offsets.vec,
        "vlen" => &mut offsets.vlen,
        "flags" => &mut offsets.flags,
        "flags@range" => &mut offsets.range_flags,
        "ret" => &mut offsets.ret,
        "start" => &mut offsets.start,
        _ => return None,
    })
}

/// Every argument is one 8-byte slot, at the same offset in every syscall tracepoint of a
/// kernel; the first tracepoint that has an argument fixes its offset, and a tracepoint that
/// disagrees is left out (with a note) rather than read wrongly.
fn classic(k: &KernelFacts, plan: &mut Plan) {
    let mut offsets = SyscallOffsets::ABSENT;
    let mut missing = Vec::new();
    for &(program, tracepoint, args) in CLASSIC {
        let Some(format) = k.event("syscalls", tracepoint) else {
            missing.push(tracepoint);
            continue;
        };
        if fits(&format, args, &mut offsets) {
            let part = if program.starts_with("write") {
                Part::LogicalWrites
            } else {
                Part::SyncCalls
            };
            let step = Step::classic(program, "syscalls", tracepoint, part);
            plan.steps.push(if program.starts_with("sync_enter") {
                step.after("sync_exit")
            } else {
                step
            });
        } else {
            plan.notes.push(format!(
                "syscalls:{tracepoint} has an unexpected layout; not traced"
            ));
        }
    }
    if missing.len() == CLASSIC.len() {
        plan.notes.push(
            "no syscall tracepoints (CONFIG_FTRACE_SYSCALLS off): sync latency and logical writes are not measured"
                .to_string(),
        );
    } else if !missing.is_empty() {
        plan.notes.push(format!(
            "missing syscall tracepoints, not traced: {}",
            missing.join(", ")
        ));
    }
    plan.globals.syscalls = offsets;
}

pub(super) fn fits(format: &EventFormat, args: &[&str], offsets: &mut SyscallOffsets) -> bool {
    let mut proposed = *offsets;
    for &arg in args {
        // `name@slot`: the field `name`, kept in the slot `name@slot` (sync_file_range's
        // flags are not where msync's are).
        let Some(field) = format.field(arg.split('@').next().unwrap_or(arg)) else {
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
