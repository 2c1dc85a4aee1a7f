//! The probe plan: which program goes on which tracepoint, with which offsets, and what is
//! degraded, as a pure function of what the kernel answered ([`KernelFacts`]). Loading and
//! attaching are `Probes::load`'s; nothing here touches the kernel, so the plan is
//! unit-tested against the facts captured in every kernel of the matrix.
//!
//! Raw tracepoints first, everywhere BTF says what they pass: they need no
//! `perf_event_open` (which Debian and Ubuntu refuse without CAP_SYS_ADMIN) and build no
//! trace record. Their typed form (`tp_btf`) before the plain one where a probe reads kernel
//! objects on every request: it reads them by direct loads, one instruction each instead of
//! a `bpf_probe_read_kernel` call, and runs where lockdown refuses that helper. Classic tracepoints remain the fallback where BTF cannot describe a
//! tracepoint (no kernel BTF; XFS's own structs without the module's BTF), planned only
//! where `perf_event_open` works for this process.

mod block;
mod durable;
mod offsets;
mod sched;
mod syscalls;
mod throttle;

use iotop_bpf_common::{
    blame::BlameOffsets,
    block::{ORIGIN_START, RawOffsets},
    dio::{DioOffsets, RawDioOffsets},
    dstate::{DStateOffsets, SchedOffsets},
    process::ExitOffsets,
    raw::{RawLayout, SYSCALL_NONE, SYSCALL_TABLE_LEN},
    sync::{DurableBtf, DurableOffsets, FileOffsets, SyscallOffsets},
    throttle::DirtyOffsets,
    tracepoint::FieldOffsets,
};

#[cfg(test)]
pub use self::durable::SyncSourceKind;
pub use self::durable::{SyncSource, on_trampolines};
use crate::facts::KernelFacts;

/// Where a program attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// A raw tracepoint (`BPF_RAW_TRACEPOINT_OPEN`).
    Raw(&'static str),
    /// A raw tracepoint whose program sees the arguments' BTF types (`tp_btf`, a tracing
    /// program attached the same way): what helpers that take kernel objects need.
    Btf(&'static str),
    /// A classic tracepoint (`perf_event_open`): category, name.
    Classic(&'static str, &'static str),
    /// A BPF iterator over kernel objects of this kind: loaded, and run by user space when it
    /// reads (`Probes::threads_in_d`), never attached to an event.
    Iter(&'static str),
    /// A trampoline at a kernel function's entry (fentry): runs only where that function does.
    Entry(&'static str),
    /// A trampoline at a kernel function's return (fexit), which also sees the return value.
    Exit(&'static str),
}

impl std::fmt::Display for Attach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Raw(name) => write!(f, "raw_tp:{name}"),
            Self::Btf(name) => write!(f, "tp_btf:{name}"),
            Self::Classic(category, name) => write!(f, "{category}:{name}"),
            Self::Iter(kind) => write!(f, "iter:{kind}"),
            Self::Entry(function) => write!(f, "fentry:{function}"),
            Self::Exit(function) => write!(f, "fexit:{function}"),
        }
    }
}

/// What a program serves: what is lost when the kernel refuses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Requests: the disk and process I/O, the latency histograms (required).
    Block,
    /// Requests merged into others are forgotten at once, not left to go stale.
    Merges,
    /// btt's split of queue time at the scheduler (G2I / I2D).
    SchedSplit,
    /// The D-state pane.
    DState,
    /// The wait site of every finished D episode (not only sampled ones).
    WaitSites,
    /// The wait site of every thread still in D at a tick, from the probes.
    StuckSites,
    /// Exited processes are forgotten soon after.
    Exits,
    /// Sync system calls: latency and write amplification per call.
    SyncCalls,
    /// Bytes processes ask to write.
    LogicalWrites,
    /// O_SYNC/O_DSYNC writes counted as syncs.
    SyncedWrites,
    /// io_uring fsync and sync_file_range.
    UringSyncs,
    /// Direct I/O calls: sub-block tail writes and unaligned direct I/O.
    DirectIo,
    /// Direct I/O call latency (the wait before the request).
    CallLatency,
    /// Dirty throttling pauses.
    DirtyPauses,
    /// Write-back charged to the process that dirtied the pages.
    WritebackBlame,
    /// Requests read by direct loads (`tp_btf`); without, their raw twins read them with a
    /// helper call, which costs more per request.
    TypedReads,
    /// The system-call probes on the followed calls only (trampolines); without, raw
    /// `sys_enter`/`sys_exit` do the same work and run on every system call of the host.
    Trampolines,
}

impl Part {
    /// What is lost without it, for a degraded note.
    pub fn loss(self) -> &'static str {
        match self {
            Self::Block => "block I/O is not seen",
            Self::Merges => "merged requests are counted as unpaired",
            Self::SchedSplit => "queue time is not split at the scheduler (G2I/I2D)",
            Self::DState => "the D-state pane is off",
            Self::WaitSites => "D episodes show a wait site only when sampled",
            Self::StuckSites => "threads still in D show a wait site from /proc only (root)",
            Self::Exits => "exited processes are forgotten after 10 idle minutes",
            Self::SyncCalls => "sync calls are not seen (no sync latency, no amplification)",
            Self::LogicalWrites => "bytes asked to be written are not counted",
            Self::SyncedWrites => "O_SYNC/O_DSYNC writes are not counted as syncs",
            Self::UringSyncs => "io_uring syncs are not counted",
            Self::DirectIo => "sub-block tail writes and unaligned direct I/O are not detected",
            Self::CallLatency => "direct I/O call latency is not measured",
            Self::DirtyPauses => "dirty throttling is not seen",
            Self::WritebackBlame => "write-back is charged to the flusher",
            Self::TypedReads => {
                "requests are read with bpf_probe_read_kernel, not direct loads (more BPF time per request)"
            }
            Self::Trampolines => "run on every system call of the host, not only the followed ones",
        }
    }
}

/// One program to load and attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub program: &'static str,
    pub attach: Attach,
    pub part: Part,
    /// A failure stops the tool (the block probes); any other degrades its part.
    pub required: bool,
    /// Attached only if this program was: what it begins, that one ends.
    pub after: Option<&'static str>,
    /// Tried only if this program was refused: a plainer program doing the same work.
    pub instead_of: Option<&'static str>,
    /// Loaded now, attached only when the first io_uring sync is seen: it runs on every
    /// io_uring completion of the host, for nothing until then.
    pub deferred: bool,
}

impl Step {
    fn raw(program: &'static str, tracepoint: &'static str, part: Part) -> Self {
        Self {
            program,
            attach: Attach::Raw(tracepoint),
            part,
            required: false,
            after: None,
            instead_of: None,
            deferred: false,
        }
    }

    fn btf(program: &'static str, tracepoint: &'static str, part: Part) -> Self {
        Self {
            attach: Attach::Btf(tracepoint),
            ..Self::raw(program, tracepoint, part)
        }
    }

    fn entry(program: &'static str, function: &'static str, part: Part) -> Self {
        Self {
            attach: Attach::Entry(function),
            ..Self::raw(program, function, part)
        }
    }

    fn exit(program: &'static str, function: &'static str, part: Part) -> Self {
        Self {
            attach: Attach::Exit(function),
            ..Self::raw(program, function, part)
        }
    }

    /// A trampoline: attached with all the others or not at all ([`TRAMPOLINES`]).
    pub fn is_trampoline(&self) -> bool {
        matches!(self.attach, Attach::Entry(_) | Attach::Exit(_))
    }

    fn iter(program: &'static str, kind: &'static str, part: Part) -> Self {
        Self {
            attach: Attach::Iter(kind),
            ..Self::raw(program, kind, part)
        }
    }

    fn classic(
        program: &'static str,
        category: &'static str,
        name: &'static str,
        part: Part,
    ) -> Self {
        Self {
            attach: Attach::Classic(category, name),
            ..Self::raw(program, name, part)
        }
    }

    fn required(self) -> Self {
        Self {
            required: true,
            ..self
        }
    }

    fn after(self, program: &'static str) -> Self {
        Self {
            after: Some(program),
            ..self
        }
    }

    fn instead_of(self, program: &'static str) -> Self {
        Self {
            instead_of: Some(program),
            ..self
        }
    }

    fn deferred(self) -> Self {
        Self {
            deferred: true,
            ..self
        }
    }
}

/// What the system-call probes' raw twins are `instead_of`: the trampolines as one. One
/// refused leaves the others detached too, or a call could begin in one and end in another
/// way, or be seen twice.
pub const TRAMPOLINES: &str = "the system-call trampolines";

/// The values of the programs' globals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Globals {
    pub raw_offsets: RawOffsets,
    pub raw_layout: RawLayout,
    pub syscall_table: [u8; SYSCALL_TABLE_LEN],
    pub start_fields: FieldOffsets,
    pub issue_fields: FieldOffsets,
    pub complete_fields: FieldOffsets,
    pub frontmerge_fields: FieldOffsets,
    pub rq_merge_fields: FieldOffsets,
    pub start_origin: u8,
    pub sched: SchedOffsets,
    pub dstate: DStateOffsets,
    pub exit: ExitOffsets,
    pub syscalls: SyscallOffsets,
    pub files: FileOffsets,
    pub durable: DurableOffsets,
    pub durable_btf: DurableBtf,
    pub dio: DioOffsets,
    pub raw_dio: RawDioOffsets,
    /// 1 when the direct I/O completion is attached, so the begin probe notes calls.
    pub dio_call_latency: u8,
    pub dirty: DirtyOffsets,
    pub blame: BlameOffsets,
    /// `FAULT_INJECT` (0: none).
    pub fault: u32,
}

impl Default for Globals {
    fn default() -> Self {
        Self {
            raw_offsets: RawOffsets::ZERO,
            raw_layout: RawLayout::ABSENT,
            syscall_table: [SYSCALL_NONE; SYSCALL_TABLE_LEN],
            start_fields: FieldOffsets::ABSENT,
            issue_fields: FieldOffsets::ABSENT,
            complete_fields: FieldOffsets::ABSENT,
            frontmerge_fields: FieldOffsets::ABSENT,
            rq_merge_fields: FieldOffsets::ABSENT,
            start_origin: ORIGIN_START,
            sched: SchedOffsets::ABSENT,
            dstate: DStateOffsets::ABSENT,
            exit: ExitOffsets::ABSENT,
            syscalls: SyscallOffsets::ABSENT,
            files: FileOffsets::ZERO,
            durable: DurableOffsets::ABSENT,
            durable_btf: DurableBtf::ABSENT,
            dio: DioOffsets::ABSENT,
            raw_dio: RawDioOffsets::ZERO,
            dio_call_latency: 0,
            dirty: DirtyOffsets::ABSENT,
            blame: BlameOffsets::OFF,
            fault: 0,
        }
    }
}

/// What the user asked for beyond the kernel's facts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `IOTOP_BPF_TRACEPOINTS=classic`: the classic tracepoints everywhere (for comparison
    /// and tests).
    pub classic: bool,
    /// `IOTOP_BPF_FAULT` (tests): a fault the probes are built to make the kernel refuse.
    pub fault: u32,
}

/// Set to `classic` to force the classic tracepoints (for comparison and tests).
pub const MODE_ENV: &str = "IOTOP_BPF_TRACEPOINTS";

/// Set (tests) to make the kernel refuse a probe: `reject-dstate`, both D-state switch probes;
/// `reject-wait-sites`, the BTF-typed switch probe that takes stacks; `reject-block`, the raw
/// completion probe (required: the tool stops).
pub const FAULT_ENV: &str = "IOTOP_BPF_FAULT";

/// The plan's options from the environment.
pub fn options_from_env() -> Options {
    Options {
        classic: std::env::var(MODE_ENV).is_ok_and(|v| v == "classic"),
        fault: match std::env::var(FAULT_ENV).as_deref() {
            Ok("reject-dstate") => iotop_bpf_common::raw::FAULT_REJECT_DSTATE,
            Ok("reject-wait-sites") => iotop_bpf_common::raw::FAULT_REJECT_WAIT_SITES,
            Ok("reject-block") => iotop_bpf_common::raw::FAULT_REJECT_BLOCK,
            _ => 0,
        },
    }
}

/// The whole plan.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Raw or classic tracepoints for the block probes, and why.
    pub mode: String,
    /// Where the system-call probes run (trampolines, raw `sys_enter`/`sys_exit`, classic
    /// tracepoints), and why.
    pub syscall_path: String,
    /// In load and attach order: a program is listed after the one it follows (`after`).
    pub steps: Vec<Step>,
    pub globals: Globals,
    /// What is degraded on this kernel, each with its reason.
    pub notes: Vec<String>,
    /// Every way to make data durable, and how it is traced here or why not.
    pub sync_sources: Vec<SyncSource>,
    /// Direct I/O call latency can be measured here.
    pub call_latency: bool,
    /// Why this kernel refuses `bpf_probe_read_kernel` (confidentiality lockdown), if it
    /// does: the reason of every program it refuses for that.
    pub lockdown: Option<String>,
}

/// Classic tracepoints can be attached by this process, or why not (what to do).
fn classic_allowed(k: &KernelFacts) -> Result<(), String> {
    if let Some(why) = &k.tracefs_error {
        return Err(format!("classic tracepoints need tracefs: {why}"));
    }
    k.access.perf_event_open.clone().map_err(|e| {
        let paranoid = k.access.perf_event_paranoid.unwrap_or(0);
        if paranoid > 2 {
            format!(
                "classic tracepoints need perf_event_open, which this kernel refuses ({e}) at kernel.perf_event_paranoid={paranoid} without CAP_SYS_ADMIN: run as root, add CAP_SYS_ADMIN, or `sysctl kernel.perf_event_paranoid=2`"
            )
        } else {
            format!("classic tracepoints need perf_event_open, which failed here: {e}")
        }
    })
}

/// Plans the probes for the kernel `k` describes. `Err` when the tool cannot run at all
/// (no way to see block requests), with the reason.
pub fn plan(k: &KernelFacts, options: Options) -> Result<Plan, String> {
    let mut plan = Plan {
        mode: String::new(),
        syscall_path: String::new(),
        steps: Vec::new(),
        globals: Globals {
            fault: options.fault,
            ..Globals::default()
        },
        notes: Vec::new(),
        sync_sources: Vec::new(),
        call_latency: false,
        lockdown: k.lockdown_refuses_reads(),
    };
    // Confidentiality lockdown refuses `bpf_probe_read_kernel` and hides tracefs's events
    // (Debian's 6.12: /sys/kernel/tracing is mounted and empty). The block probes on
    // `tp_btf` read by direct loads, which it leaves: they are planned alone, blame off
    // (block.rs). Programs that read with the helper are refused at load, and each part lost
    // is named with lockdown as its reason (attach.rs).
    let classic = classic_allowed(k);
    let raw = if options.classic {
        Err(format!("{}=classic", MODE_ENV))
    } else {
        k.btf_error.clone().map_or(Ok(()), Err)
    };
    if k.has_btf() && k.enum_value("BPF_MAP_TYPE_RINGBUF").is_none() {
        return Err(
            "this kernel has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF: Linux 5.8 or newer)"
                .to_string(),
        );
    }
    plan.globals.files = offsets::files(k).unwrap_or_else(|e| {
        plan.notes.push(format!(
            "kernel BTF: {e}: synced files are named from /proc only (not for processes that already exited)"
        ));
        FileOffsets::ZERO
    });
    block::plan(k, raw.as_ref().err(), &classic, &mut plan)?;
    sched::plan(k, raw.is_ok(), &classic, &mut plan);
    syscalls::plan(k, raw.is_ok(), &classic, &mut plan);
    durable::plan(k, raw.is_ok(), &classic, &mut plan);
    throttle::plan(k, raw.is_ok(), &classic, &mut plan);
    // Programs that begin something go after the ones that end it.
    order(&mut plan.steps);
    Ok(plan)
}

/// Puts every step after the step it follows, keeping the order otherwise.
fn order(steps: &mut Vec<Step>) {
    let mut ordered: Vec<Step> = Vec::with_capacity(steps.len());
    let mut pending = std::mem::take(steps);
    while !pending.is_empty() {
        let before = pending.len();
        pending.retain(|step| {
            let ready = step
                .after
                .is_none_or(|first| ordered.iter().any(|s| s.program == first));
            if ready {
                ordered.push(step.clone());
            }
            !ready
        });
        if pending.len() == before {
            // What they follow is not planned: they are not either.
            break;
        }
    }
    *steps = ordered;
}

/// A raw tracepoint's argument `index` is a pointer to `struct name`.
fn arg_is(k: &KernelFacts, tracepoint: &str, index: usize, name: &str) -> bool {
    k.raw_tracepoint(tracepoint)
        .and_then(|params| params.get(index).cloned())
        .is_some_and(|p| {
            p.ty == format!("struct {name} *") || p.ty == format!("const struct {name} *")
        })
}

/// The index of raw tracepoint `tracepoint`'s first argument that points to `struct name`.
fn arg_of(k: &KernelFacts, tracepoint: &str, name: &str) -> Option<u32> {
    let params = k.raw_tracepoint(tracepoint)?;
    (0..params.len())
        .find(|&i| arg_is(k, tracepoint, i, name))
        .and_then(|i| u32::try_from(i).ok())
}

#[cfg(test)]
mod tests;
