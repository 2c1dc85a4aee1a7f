//! iotop-bpf's loader, the only user-space crate with aya: the eBPF object (built by
//! `build.rs`, embedded here), the kernel's facts ([`facts`]), the plan made of them
//! ([`plan`]), and the probes loaded and attached as the plan says, one program at a time: a
//! program the kernel refuses degrades its part with a one-line reason (the whole verifier
//! log goes to `iotop-bpf check --verbose`); only the block probes are required.

pub mod access;
mod attach;
pub mod btf;
pub mod control;
mod episodes;
pub mod facts;
pub mod plan;
pub mod privilege;
mod stuck;
pub mod tracefs;

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap},
    programs::{Program, RawTracePoint, TracePoint},
};
use iotop_bpf_common::{
    aggregate::{AGGREGATE_ALIGN, PROC_DISK_AGGREGATES, ProcDiskAggregate, ProcDiskKey},
    dio::DIO_STREAM_ALIGN,
    maps::{
        COUNTERS, DISK_AGGREGATES, DSTATE_EPISODES, DSTATE_TIME, DiskAggregate, EVENTS,
        LOGICAL_WRITES, LogicalWrites, SCHED_SPLIT_ON, STACKS,
    },
    throttle::{
        CALL_LATENCY_ON, CallKey, CallTotals, DIO_CALL_TOTALS, DIO_CALLS_IN_FLIGHT, DIRTY_PAUSES,
        DirtyTotals,
    },
};

use self::{
    attach::{attach_all, report_refusals, set_globals},
    facts::{Access, KernelFacts},
    plan::{Plan, Step},
    privilege::Environment,
};

/// The compiled eBPF object, embedded at build time (empty when built with AYA_BUILD_SKIP).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/iotop-bpf"));

/// Set to `classic` to force the classic tracepoints (for comparison and tests).
pub const MODE_ENV: &str = "IOTOP_BPF_TRACEPOINTS";

/// Set (tests) to make the kernel refuse a probe: `reject-dstate`, both D-state switch probes;
/// `reject-wait-sites`, the BTF-typed switch probe that takes stacks; `reject-block`, the raw
/// completion probe (required: the tool stops).
pub const FAULT_ENV: &str = "IOTOP_BPF_FAULT";

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

/// Which tracepoint each program sits on, and what is degraded on this kernel.
#[derive(Clone, Debug, Default)]
pub struct ProbeReport {
    /// Raw or classic tracepoints for the block probes, and why.
    pub mode: String,
    /// Where the system-call probes run, and why.
    pub syscall_path: String,
    pub attached: Vec<String>,
    /// Human-readable notes on missing sources, e.g. attribution falling back.
    pub degraded: Vec<String>,
    /// Direct I/O call latency can be measured (both iomap probes attached); the feed turns
    /// it on and off (`CALL_LATENCY_ON`).
    pub call_latency: bool,
    /// Every way to make data durable, and how it is traced here or why not.
    pub sync_sources: Vec<plan::SyncSource>,
    /// The verifier's whole log for each program the kernel refused (`check --verbose`).
    pub refused: Vec<(String, String)>,
}

/// The loaded probes. Dropping it detaches every program.
pub struct Probes {
    ebpf: Ebpf,
    /// Every attachment, owned here so that they can be detached all at once.
    links: Vec<Box<dyn Send>>,
    /// Loaded, attached only once io_uring syncs show up (`Probes::attach_for_io_uring_syncs`,
    /// in `control.rs` with every other change the drain path makes to the probes).
    deferred: Vec<Step>,
    pub report: ProbeReport,
}

/// The raw tracepoint program `program` of the object.
fn raw_program<'a>(ebpf: &'a mut Ebpf, program: &str) -> Result<&'a mut RawTracePoint> {
    as_raw(ebpf.program_mut(program), program)
}

/// The classic tracepoint program `program` of the object.
fn classic_program<'a>(ebpf: &'a mut Ebpf, program: &str) -> Result<&'a mut TracePoint> {
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

/// The plan's options from the environment.
pub fn options_from_env() -> plan::Options {
    plan::Options {
        classic: std::env::var(MODE_ENV).is_ok_and(|v| v == "classic"),
        fault: match std::env::var(FAULT_ENV).as_deref() {
            Ok("reject-dstate") => iotop_bpf_common::raw::FAULT_REJECT_DSTATE,
            Ok("reject-wait-sites") => iotop_bpf_common::raw::FAULT_REJECT_WAIT_SITES,
            Ok("reject-block") => iotop_bpf_common::raw::FAULT_REJECT_BLOCK,
            _ => 0,
        },
    }
}

/// The maps user space reads.
pub struct ProbeMaps {
    pub events: RingBuf<MapData>,
    pub counters: PerCpuArray<MapData, u64>,
    pub disks: PerCpuHashMap<MapData, u32, DiskAggregate>,
    /// tgid -> bytes asked to be written and the writer's command (an LRU per-CPU hash;
    /// aya reads it like a hash).
    pub logical_writes: PerCpuHashMap<MapData, u32, LogicalWrites>,
    pub stacks: StackTraceMap<MapData>,
    /// tgid -> ns in finished D episodes.
    pub dstate_time: PerCpuHashMap<MapData, u32, u64>,
    /// (tgid, filesystem) -> what its direct I/O calls took, cumulative.
    pub dio_calls: PerCpuHashMap<MapData, CallKey, CallTotals>,
    /// tgid -> its pauses in balance_dirty_pages, cumulative.
    pub dirty_pauses: PerCpuHashMap<MapData, u32, DirtyTotals>,
    /// (tgid, disk) -> the requests summed instead of streamed, cumulative.
    pub proc_disks: PerCpuHashMap<MapData, ProcDiskKey, ProcDiskAggregate>,
    /// What user space writes into the kernel: the switches, the alignments, the calls in
    /// flight and the D episodes in progress.
    pub knobs: control::Knobs,
}

impl Probes {
    /// Asks the kernel what the plan needs, plans, loads and attaches: what `check`, the
    /// live view and every headless mode start with.
    pub fn start(env: &Environment) -> Result<Self> {
        // aya's loader parses the kernel's BTF too when it is made (~15 ms here, more on a
        // busy host): let it do that on the other core while this one reads ours.
        // With our own copy for the tp_btf programs (the loader keeps its own private).
        let loader = std::thread::spawn(|| (EbpfLoader::new(), Btf::from_sys_fs().ok()));
        let facts = KernelFacts::gather(env.kernel_release.clone(), env.tracefs.clone());
        let plan = plan::plan(&facts, options_from_env()).map_err(|e| anyhow!(e))?;
        let (loader, btf) = loader
            .join()
            .map_err(|_| anyhow!("preparing the eBPF loader panicked"))?;
        let mut probes = Self::load(&plan, &facts.access, loader, btf.as_ref())?;
        probes
            .report
            .degraded
            .splice(0..0, env.degraded.iter().cloned());
        Ok(probes)
    }

    /// Loads and attaches the programs of `plan`, one at a time.
    pub fn load<'a>(
        plan: &'a Plan,
        access: &Access,
        mut loader: EbpfLoader<'a>,
        btf: Option<&Btf>,
    ) -> Result<Self> {
        if EBPF_OBJECT.is_empty() {
            bail!(
                "this binary was built without its eBPF object (AYA_BUILD_SKIP was set); build it with `cargo xtask build`"
            );
        }
        access::raise_memlock(access).map_err(|e| anyhow!(e))?;
        set_globals(&mut loader, plan);
        let mut ebpf = loader
            .load(EBPF_OBJECT)
            .context("create the eBPF maps (load the object into the kernel)")?;

        let mut report = ProbeReport {
            mode: plan.mode.clone(),
            syscall_path: plan.syscall_path.clone(),
            degraded: plan.notes.clone(),
            call_latency: plan.call_latency,
            sync_sources: plan.sync_sources.clone(),
            ..ProbeReport::default()
        };
        let attached = attach_all(&mut ebpf, plan, btf, &mut report)?;
        let planned = plan.steps.iter().any(Step::is_trampoline);
        if planned && !attached.failed.contains_key(plan::TRAMPOLINES) {
            plan::on_trampolines(&mut report.sync_sources);
        }
        if let Some(why) = attached.failed.get(plan::TRAMPOLINES) {
            report.syscall_path = if attached.failed.contains_key("raw_sys_exit") {
                format!("none: a trampoline and raw sys_exit were refused: {why}")
            } else {
                format!(
                    "raw sys_enter/sys_exit, {}: a trampoline was refused: {why}",
                    plan::Part::Trampolines.loss()
                )
            };
        }
        report_refusals(&mut report, &attached.refused, &attached.failed);
        Ok(Self {
            ebpf,
            links: attached.links,
            deferred: attached.deferred,
            report,
        })
    }

    /// The programs, for their run-time statistics.
    pub fn programs(&self) -> impl Iterator<Item = (&str, &aya::programs::Program)> {
        self.ebpf.programs()
    }

    pub fn take_maps(&mut self) -> Result<ProbeMaps> {
        let mut take = |name: &str| {
            self.ebpf
                .take_map(name)
                .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
        };
        Ok(ProbeMaps {
            events: RingBuf::try_from(take(EVENTS)?).context("map EVENTS")?,
            counters: PerCpuArray::try_from(take(COUNTERS)?).context("map COUNTERS")?,
            disks: PerCpuHashMap::try_from(take(DISK_AGGREGATES)?)
                .context("map DISK_AGGREGATES")?,
            logical_writes: PerCpuHashMap::try_from(take(LOGICAL_WRITES)?)
                .context("map LOGICAL_WRITES")?,
            stacks: StackTraceMap::try_from(take(STACKS)?).context("map STACKS")?,
            dstate_time: PerCpuHashMap::try_from(take(DSTATE_TIME)?).context("map DSTATE_TIME")?,
            dio_calls: PerCpuHashMap::try_from(take(DIO_CALL_TOTALS)?)
                .context("map DIO_CALL_TOTALS")?,
            dirty_pauses: PerCpuHashMap::try_from(take(DIRTY_PAUSES)?)
                .context("map DIRTY_PAUSES")?,
            proc_disks: PerCpuHashMap::try_from(take(PROC_DISK_AGGREGATES)?)
                .context("map PROC_DISK_AGGREGATES")?,
            knobs: control::Knobs {
                dio_stream_align: Array::try_from(take(DIO_STREAM_ALIGN)?)
                    .context("map DIO_STREAM_ALIGN")?,
                sched_split_on: Array::try_from(take(SCHED_SPLIT_ON)?)
                    .context("map SCHED_SPLIT_ON")?,
                call_latency_on: Array::try_from(take(CALL_LATENCY_ON)?)
                    .context("map CALL_LATENCY_ON")?,
                aggregate_align: Array::try_from(take(AGGREGATE_ALIGN)?)
                    .context("map AGGREGATE_ALIGN")?,
                dio_calls_in_flight: Array::try_from(take(DIO_CALLS_IN_FLIGHT)?)
                    .context("map DIO_CALLS_IN_FLIGHT")?,
                dstate_episodes: match take(DSTATE_EPISODES)? {
                    aya::maps::Map::Array(map) => episodes::EpisodeTableView::map(map)?,
                    _ => bail!("map DSTATE_EPISODES is not an array"),
                },
            },
        })
    }
}

impl Drop for Probes {
    /// Detaching a classic tracepoint waits for RCU grace periods under a kernel-wide lock,
    /// one attachment after the other: two dozen of them took 0.7 to 1.3 s, whether closed in
    /// turn or from parallel threads. A child process that shares the attachments holds the
    /// last references instead: this process closes its own at once and exits, and the child
    /// (its standard streams closed, so a reader of our output sees the end at once) waits
    /// for it to be gone, then exits and detaches them in the background. The child keeps
    /// only the BPF and perf fds: a file, a pipe or a device it held could keep a filesystem
    /// busy or a reader waiting.
    fn drop(&mut self) {
        if self.links.is_empty() {
            return;
        }
        // Listed before the fork: the child may only make async-signal-safe calls.
        let others: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .map(|fds| {
                fds.flatten()
                    .filter_map(|fd| {
                        let n = fd.file_name().to_str()?.parse::<i32>().ok()?;
                        let target = std::fs::read_link(fd.path()).ok()?;
                        (!target.to_string_lossy().starts_with("anon_inode:")).then_some(n)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut pipe = [0; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return; // detach in this process, the slow way
        }
        // SAFETY: the child only calls async-signal-safe functions (close, read, _exit)
        // before it exits, as fork in a multithreaded process requires.
        match unsafe { libc::fork() } {
            0 => unsafe {
                for &fd in others.iter().chain(&[0, 1, 2, pipe[1]]) {
                    if fd != pipe[0] {
                        libc::close(fd);
                    }
                }
                let mut byte = 0u8;
                // Returns at end of file: when this process (the writer) is gone.
                while libc::read(pipe[0], (&raw mut byte).cast(), 1) > 0 {}
                libc::_exit(0);
            },
            -1 => {}
            _ => {
                // SAFETY: our copy of the read end; the write end stays open until we exit.
                unsafe { libc::close(pipe[0]) };
            }
        }
    }
}
