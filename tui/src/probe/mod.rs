//! Loading and attaching the eBPF probes, with field offsets taken from tracefs.

pub mod btf;
mod dio;
pub mod durable;
pub mod episodes;
pub mod privilege;
mod raw;
mod sched;
mod syscalls;
mod throttle;
pub mod tracefs;

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap},
    programs::{RawTracePoint, TracePoint},
};
use iotop_bpf_common::{
    blame::{BlameOffsets, GLOBAL_BLAME_OFFSETS},
    block::{GLOBAL_RAW_OFFSETS, ORIGIN_INSERT, ORIGIN_START, RawOffsets},
    dio::{
        DIO_STREAM_ALIGN, DioOffsets, GLOBAL_DIO_OFFSETS, GLOBAL_RAW_DIO_OFFSETS, RawDioOffsets,
    },
    dstate::{GLOBAL_DSTATE_RECORD_MIN_NS, GLOBAL_SCHED_OFFSETS},
    maps::{
        COUNTERS, DISK_AGGREGATES, DSTATE_EPISODES, DSTATE_TIME, DiskAggregate, EVENTS,
        LOGICAL_WRITES, SCHED_SPLIT_ON, STACKS,
    },
    process::{ExitOffsets, GLOBAL_EXIT_OFFSETS},
    rwbs::RWBS_READ_LEN,
    sync::{
        FileOffsets, GLOBAL_DURABLE_BTF, GLOBAL_DURABLE_OFFSETS, GLOBAL_FILE_OFFSETS,
        GLOBAL_SYSCALL_OFFSETS, URING_SYNC_SEEN,
    },
    throttle::{
        CALL_LATENCY_ON, CallKey, CallSlot, CallTotals, DIO_CALL_TOTALS, DIO_CALLS_IN_FLIGHT,
        DIRTY_PAUSES, DirtyOffsets, DirtyTotals, GLOBAL_DIO_CALL_LATENCY, GLOBAL_DIRTY_OFFSETS,
    },
    tracepoint::{
        ABSENT, FieldOffsets, GLOBAL_COMPLETE_FIELDS, GLOBAL_FRONTMERGE_FIELDS,
        GLOBAL_ISSUE_FIELDS, GLOBAL_RQ_MERGE_FIELDS, GLOBAL_START_FIELDS, GLOBAL_START_ORIGIN,
        GLOBAL_WAKEUP_BYTES, WINDOW_LEN, WINDOW_START,
    },
};

use self::{
    privilege::Environment,
    tracefs::{EventFormat, Tracefs},
};

/// The compiled eBPF object, embedded at build time (empty when built with AYA_BUILD_SKIP).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/iotop-bpf"));

/// Bytes of unread ring data above which the kernel wakes the reader early (between the
/// reader's own drain ticks). A quarter of the ring leaves room for bursts while it drains.
const WAKEUP_BYTES: u64 = 1 << 20;

/// Finished D episodes shorter than this only add to their process's D time; longer ones are
/// streamed (one record each) for the "longest recent episodes" list.
const DSTATE_RECORD_MIN_NS: u64 = 1_000_000;

/// Which tracepoint each program sits on, and what is degraded on this kernel.
#[derive(Clone, Debug, Default)]
pub struct ProbeReport {
    /// Raw or classic tracepoints for the block and wakeup probes, and why.
    pub mode: String,
    pub attached: Vec<String>,
    /// Human-readable notes on missing sources, e.g. attribution falling back.
    pub degraded: Vec<String>,
    /// Direct I/O call latency can be measured (both iomap probes attached); the feed turns
    /// it on and off (`CALL_LATENCY_ON`).
    pub call_latency: bool,
    /// Every way to make data durable, and how it is traced here or why not.
    pub sync_sources: Vec<durable::SyncSource>,
}

/// The loaded probes. Dropping it detaches every program.
pub struct Probes {
    ebpf: Ebpf,
    /// Every attachment, owned here so that they can be detached all at once.
    links: Vec<Box<dyn Send>>,
    /// Loaded, attached only once io_uring syncs show up ([`Probes::attach_for_io_uring_syncs`]).
    deferred: Vec<Deferred>,
    pub report: ProbeReport,
}

/// The raw tracepoint program `program` of the object.
fn raw_program<'a>(ebpf: &'a mut Ebpf, program: &str) -> Result<&'a mut RawTracePoint> {
    ebpf.program_mut(program)
        .ok_or_else(|| anyhow!("program {program} missing from the eBPF object"))?
        .try_into()
        .with_context(|| format!("{program} is not a raw tracepoint program"))
}

/// The classic tracepoint program `program` of the object.
fn classic_program<'a>(ebpf: &'a mut Ebpf, program: &str) -> Result<&'a mut TracePoint> {
    ebpf.program_mut(program)
        .ok_or_else(|| anyhow!("program {program} missing from the eBPF object"))?
        .try_into()
        .with_context(|| format!("{program} is not a tracepoint program"))
}

/// Attaches a loaded raw tracepoint program; the link detaches it when dropped.
fn attach_raw(
    raw_tracepoint: &mut RawTracePoint,
    program: &str,
    name: &str,
) -> Result<Box<dyn Send>> {
    let link = raw_tracepoint
        .attach(name)
        .with_context(|| format!("attach {program} to raw tracepoint {name}"))?;
    Ok(Box::new(raw_tracepoint.take_link(link)?))
}

/// A program attached on demand: the ends of io_uring syncs run on every io_uring completion
/// (`io_uring_complete`) or `io_uring_enter` exit of the host, ~40 ns each measured, for
/// nothing until some program makes an io_uring sync.
enum Deferred {
    Raw {
        program: &'static str,
        name: &'static str,
    },
    Classic {
        program: &'static str,
        category: &'static str,
        name: &'static str,
    },
}

impl Deferred {
    fn of_classic(program: &'static str, name: &str) -> bool {
        program == "uring_complete"
            || (program == "durable_write_exit" && name == "sys_exit_io_uring_enter")
    }
}

/// The maps user space reads.
pub struct ProbeMaps {
    pub events: RingBuf<MapData>,
    pub counters: PerCpuArray<MapData, u64>,
    pub disks: PerCpuHashMap<MapData, u32, DiskAggregate>,
    /// tgid -> bytes asked to be written (an LRU per-CPU hash; aya reads it like a hash).
    pub logical_writes: PerCpuHashMap<MapData, u32, u64>,
    /// The D-state episodes in progress, by thread id.
    pub dstate_episodes: episodes::EpisodeTableView,
    pub stacks: StackTraceMap<MapData>,
    /// tgid -> ns in finished D episodes.
    pub dstate_time: PerCpuHashMap<MapData, u32, u64>,
    /// The alignment below which direct I/O calls are streamed (one entry).
    pub dio_stream_align: Array<MapData, u64>,
    /// (tgid, filesystem) -> what its direct I/O calls took, cumulative.
    pub dio_calls: PerCpuHashMap<MapData, CallKey, CallTotals>,
    /// Direct I/O calls in progress (a set-associative array; cleared by the feed when
    /// measuring is switched off).
    pub dio_calls_in_flight: Array<MapData, CallSlot>,
    /// tgid -> its pauses in balance_dirty_pages, cumulative.
    pub dirty_pauses: PerCpuHashMap<MapData, u32, DirtyTotals>,
    /// The on/off switch of direct I/O call latency (one entry).
    pub call_latency_on: Array<MapData, u32>,
    /// The switch of the scheduler split (`SCHED_SPLIT_ON`).
    pub sched_split_on: Array<MapData, u32>,
}

/// One program and the tracepoint(s) it may attach to, in order of preference.
struct Attachment {
    program: &'static str,
    candidates: &'static [(&'static str, &'static str)],
    global: &'static str,
    required: bool,
}

const START: Attachment = Attachment {
    program: "block_start",
    candidates: &[("block", "block_io_start"), ("block", "block_rq_insert")],
    global: GLOBAL_START_FIELDS,
    required: false,
};
const ISSUE: Attachment = Attachment {
    program: "block_issue",
    candidates: &[("block", "block_rq_issue")],
    global: GLOBAL_ISSUE_FIELDS,
    required: true,
};
const COMPLETE: Attachment = Attachment {
    program: "block_complete",
    candidates: &[("block", "block_rq_complete")],
    global: GLOBAL_COMPLETE_FIELDS,
    required: true,
};
const FRONTMERGE: Attachment = Attachment {
    program: "block_frontmerge",
    candidates: &[("block", "block_bio_frontmerge")],
    global: GLOBAL_FRONTMERGE_FIELDS,
    required: false,
};
const RQ_MERGE: Attachment = Attachment {
    program: "block_rq_merge",
    candidates: &[("block", "block_rq_merge")],
    global: GLOBAL_RQ_MERGE_FIELDS,
    required: false,
};

impl Probes {
    /// Reads the tracepoint layouts, loads the programs with them and attaches them.
    pub fn load(env: &Environment) -> Result<Self> {
        if EBPF_OBJECT.is_empty() {
            bail!(
                "this binary was built without its eBPF object (AYA_BUILD_SKIP was set); build it with `cargo xtask build`"
            );
        }
        raise_memlock_limit(env.kernel);

        let mut report = ProbeReport {
            degraded: env.degraded.clone(),
            ..ProbeReport::default()
        };
        let mut plan = Vec::new();
        let mut offsets = Vec::new();
        // aya's loader parses the kernel's BTF too when it is made (~15 ms here, more on a
        // busy host): let it do that on the other core while this one reads ours and tracefs.
        let loader_thread = std::thread::spawn(EbpfLoader::new);
        let btf = btf::Btf::from_sys_fs();
        let raw = raw::plan(&env.tracefs, env.kernel, btf.as_ref());
        let raw_dio = btf.as_ref().ok().and_then(|btf| raw::dio_offsets(btf).ok());
        let syscalls = syscalls::plan(&env.tracefs)?;
        let sync_syscalls: Vec<&str> = syscalls
            .attach
            .iter()
            .filter(|(program, _)| program.starts_with("sync_enter"))
            .map(|&(_, name)| name.trim_start_matches("sys_enter_"))
            .collect();
        let mut durable = durable::plan(
            &env.tracefs,
            btf.as_ref(),
            env.kernel,
            &syscalls.offsets,
            &sync_syscalls,
            &std::fs::read_to_string("/proc/filesystems").unwrap_or_default(),
        )?;
        report.sync_sources = std::mem::take(&mut durable.sources);
        report
            .degraded
            .extend(std::mem::take(&mut durable.degraded));
        let file_offsets = match &btf {
            Ok(btf) => raw::file_offsets(btf).unwrap_or_else(|e| {
                report.degraded.push(format!(
                    "kernel BTF: {e}: synced files are named from /proc only (not for processes that already exited)"
                ));
                FileOffsets::ZERO
            }),
            Err(e) => {
                report.degraded.push(format!(
                    "{e}: synced files are named from /proc only (not for processes that already exited)"
                ));
                FileOffsets::ZERO
            }
        };
        let (mut blame, blame_missing) = match (&raw, &btf) {
            (Ok(_), Ok(btf)) => raw::blame_offsets(btf),
            (Err(why), _) => (
                BlameOffsets::OFF,
                vec![format!(
                    "classic tracepoints ({why}): requests have no cgroup, write-back is charged to the flusher, and queue time is not split at the scheduler (G2I/I2D)"
                )],
            ),
            (Ok(_), Err(why)) => (BlameOffsets::OFF, vec![why.clone()]),
        };
        report.degraded.extend(blame_missing);
        // Checked now (the BTF goes below); used only if the raw begin probe is planned.
        let call_latency = throttle::call_latency(
            btf.as_ref(),
            raw_dio.is_some() && file_offsets != FileOffsets::ZERO,
        );
        drop(btf);
        report.mode = match &raw {
            Ok(_) => "raw tracepoints, kernel objects read at BTF offsets".to_string(),
            Err(why) => format!("classic tracepoints ({why})"),
        };
        let classic_block: &[&Attachment] = if raw.is_ok() {
            &[]
        } else {
            &[&START, &ISSUE, &COMPLETE, &FRONTMERGE, &RQ_MERGE]
        };
        for &attachment in classic_block {
            match find_tracepoint(&env.tracefs, attachment)? {
                Some((category, name, format)) => {
                    offsets.push((attachment.global, field_offsets(&format)?));
                    plan.push((attachment.program, category, name));
                }
                None if attachment.required => bail!(
                    "tracepoint {} is missing from this kernel ({}); iotop-bpf needs it",
                    attachment.candidates.iter().map(|(c, n)| format!("{c}:{n}")).collect::<Vec<_>>().join(" or "),
                    env.kernel_release
                ),
                None => report.degraded.push(match attachment.program {
                    "block_start" => "no block_io_start or block_rq_insert tracepoint: I/O is attributed to the task that issued it (may be a kworker), and queue time is 0".to_string(),
                    other => format!("{other}: tracepoint missing, merged requests may be counted as unpaired"),
                }),
            }
        }
        let start_origin = match plan.iter().find(|(program, ..)| *program == START.program) {
            Some((_, _, "block_rq_insert")) => {
                report.degraded.push(
                    "block_io_start is missing (kernel < 6.5): requests issued without an I/O scheduler are attributed when issued".to_string(),
                );
                ORIGIN_INSERT
            }
            _ => ORIGIN_START,
        };

        report.degraded.extend(syscalls.degraded.iter().cloned());
        plan.extend(
            syscalls
                .attach
                .iter()
                .map(|&(program, name)| (program, "syscalls", name)),
        );
        plan.extend(durable.attach.iter().copied());

        let mut raw_plan: Vec<(&str, &str)> = Vec::new();
        let mut raw_begin = false;
        let dio_offsets = match dio::plan(&env.tracefs)? {
            // The raw tracepoint reads the call from the kiocb itself (and names the file);
            // it needs the file offsets too.
            Ok(offsets) if raw_dio.is_some() && file_offsets != FileOffsets::ZERO => {
                raw_plan.push(("raw_dio_begin", "iomap_dio_rw_begin"));
                raw_begin = true;
                offsets
            }
            Ok(offsets) => {
                plan.push(("dio_begin", "iomap", "iomap_dio_rw_begin"));
                offsets
            }
            Err(why) => {
                report.degraded.push(why);
                DioOffsets::ABSENT
            }
        };
        // Direct I/O call latency: the begin probe notes calls only when their completion is
        // attached too.
        let call_latency_on = match call_latency {
            Ok(()) if raw_begin => {
                raw_plan.push(("raw_dio_complete", "iomap_dio_complete"));
                report.call_latency = true;
                1u8
            }
            Ok(()) => {
                report.degraded.push(
                    "direct I/O call latency (the wait before the request) is not measured: it needs the raw iomap_dio_rw_begin tracepoint".to_string(),
                );
                0
            }
            Err(why) => {
                report.degraded.push(why);
                0
            }
        };
        let dirty_offsets = match throttle::dirty(&env.tracefs)? {
            Ok(offsets) => {
                plan.push(("dirty_pause", "writeback", "balance_dirty_pages"));
                offsets
            }
            Err(why) => {
                report.degraded.push(why);
                DirtyOffsets::ABSENT
            }
        };
        let exit_offsets = match env.tracefs.format("sched", "sched_process_exit")? {
            Some(format) => {
                plan.push(("process_exit", "sched", "sched_process_exit"));
                ExitOffsets {
                    group_dead: format
                        .field("group_dead")
                        .filter(|f| f.size == 1)
                        .map_or(ABSENT, |f| f.offset),
                    _pad: 0,
                }
            }
            None => {
                report.degraded.push(
                    "no sched:sched_process_exit tracepoint: exited processes are forgotten after 10 idle minutes"
                        .to_string(),
                );
                ExitOffsets::ABSENT
            }
        };
        let sched = sched::plan(&env.tracefs, env.kernel)?;
        report.degraded.extend(sched.degraded.iter().cloned());
        if raw.is_ok() {
            raw_plan.extend([
                ("raw_block_start", "block_io_start"),
                ("raw_block_issue", "block_rq_issue"),
                ("raw_block_complete", "block_rq_complete"),
                ("raw_block_rq_merge", "block_rq_merge"),
                // btt's G2I / I2D split: fires only for requests that go through an I/O
                // scheduler (or wait for a busy driver), so it costs nothing without one.
                ("raw_block_insert", "block_rq_insert"),
            ]);
        }
        for &(program, name) in &sched.classic {
            if raw.is_ok() && program == "dstate_wakeup" {
                raw_plan.push(("raw_dstate_wakeup", "sched_wakeup"));
            } else {
                plan.push((program, "sched", name));
            }
        }
        if sched.raw_switch {
            raw_plan.push(("dstate_switch_raw", "sched_switch"));
        }
        if blame.writeback != 0 {
            if matches!(
                env.tracefs.format("writeback", "writeback_dirty_folio"),
                Ok(Some(_))
            ) {
                raw_plan.push(("blame_dirty_folio", "writeback_dirty_folio"));
            } else {
                blame.writeback = 0;
                report.degraded.push(
                    "no writeback:writeback_dirty_folio tracepoint: write-back is charged to the flusher, not to the process that dirtied the pages"
                        .to_string(),
                );
            }
        }

        let mut loader = loader_thread
            .join()
            .map_err(|_| anyhow!("preparing the eBPF loader panicked"))?;
        for (global, fields) in &offsets {
            loader.override_global(global, fields, true);
        }
        loader.override_global(GLOBAL_SCHED_OFFSETS, &sched.offsets, true);
        loader.override_global(GLOBAL_DIO_OFFSETS, &dio_offsets, true);
        loader.override_global(GLOBAL_EXIT_OFFSETS, &exit_offsets, true);
        loader.override_global(GLOBAL_DSTATE_RECORD_MIN_NS, &DSTATE_RECORD_MIN_NS, true);
        loader.override_global(GLOBAL_SYSCALL_OFFSETS, &syscalls.offsets, true);
        loader.override_global(GLOBAL_FILE_OFFSETS, &file_offsets, true);
        loader.override_global(GLOBAL_DURABLE_OFFSETS, &durable.offsets, true);
        loader.override_global(GLOBAL_DURABLE_BTF, &durable.btf, true);
        let raw_dio = raw_dio.unwrap_or(RawDioOffsets::ZERO);
        loader.override_global(GLOBAL_RAW_DIO_OFFSETS, &raw_dio, true);
        loader.override_global(GLOBAL_DIO_CALL_LATENCY, &call_latency_on, true);
        loader.override_global(GLOBAL_DIRTY_OFFSETS, &dirty_offsets, true);
        loader.override_global(GLOBAL_START_ORIGIN, &start_origin, true);
        loader.override_global(GLOBAL_BLAME_OFFSETS, &blame, true);
        loader.override_global(GLOBAL_WAKEUP_BYTES, &WAKEUP_BYTES, true);
        loader.override_global(
            GLOBAL_RAW_OFFSETS,
            raw.as_ref().unwrap_or(&RawOffsets::ZERO),
            true,
        );
        let mut ebpf = loader
            .load(EBPF_OBJECT)
            .context("load the eBPF object into the kernel")?;

        let mut loaded = std::collections::HashSet::new();
        let mut links: Vec<Box<dyn Send>> = Vec::new();
        let optional: std::collections::HashSet<&str> = durable
            .attach
            .iter()
            .map(|(program, ..)| *program)
            .collect();
        let mut failed: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
        // Raw ones of the durable probes first: the classic programs whose calls they end
        // are attached only if they were.
        let mut deferred = Vec::new();
        for &(program, name) in &durable.raw_attach {
            let mut attach = || -> Result<()> {
                let raw_tracepoint = raw_program(&mut ebpf, program)?;
                raw_tracepoint
                    .load()
                    .with_context(|| format!("load program {program} (verifier)"))?;
                if program == "raw_uring_complete" {
                    deferred.push(Deferred::Raw { program, name });
                    return Ok(());
                }
                links.push(attach_raw(raw_tracepoint, program, name)?);
                Ok(())
            };
            match attach() {
                Ok(()) if program == "raw_uring_complete" => report
                    .attached
                    .push(format!("raw_tp:{name} (from the first io_uring sync)")),
                Ok(()) => report.attached.push(format!("raw_tp:{name}")),
                Err(e) => {
                    failed.insert(program, format!("{e:#}"));
                }
            }
        }
        for (program, category, name) in plan {
            if failed.contains_key(program) {
                continue;
            }
            if let Some(end) = durable.ended_by(program)
                && failed.contains_key(end)
            {
                failed.insert(program, format!("{end} is not attached"));
                continue;
            }
            let mut attach = || -> Result<()> {
                let tracepoint = classic_program(&mut ebpf, program)?;
                // One program may serve several tracepoints: load it once, attach it to each.
                if loaded.insert(program) {
                    tracepoint
                        .load()
                        .with_context(|| format!("load program {program} (verifier)"))?;
                }
                if Deferred::of_classic(program, name) {
                    deferred.push(Deferred::Classic {
                        program,
                        category,
                        name,
                    });
                    return Ok(());
                }
                let link = tracepoint
                    .attach(category, name)
                    .with_context(|| format!("attach {program} to tracepoint {category}:{name}"))?;
                links.push(Box::new(tracepoint.take_link(link)?));
                Ok(())
            };
            match attach() {
                Ok(()) if Deferred::of_classic(program, name) => report
                    .attached
                    .push(format!("{category}:{name} (from the first io_uring sync)")),
                Ok(()) => report.attached.push(format!("{category}:{name}")),
                // The probes of synced writes and io_uring syncs are extras: without them the
                // sync system calls are still traced.
                Err(e) if optional.contains(program) => {
                    failed.insert(program, format!("{e:#}"));
                }
                Err(e) => return Err(e),
            }
        }
        for (program, why) in &failed {
            report
                .degraded
                .push(format!("{program}: not attached ({why})"));
            let affected: &[&str] = match *program {
                "durable_ext4_enter" | "durable_ext4_exit" => &["on ext4"],
                "durable_xfs" => &["on XFS"],
                "durable_btrfs" => &["on btrfs"],
                "durable_write_exit" => &["on XFS", "on btrfs"],
                _ => &["io_uring"],
            };
            for source in &mut report.sync_sources {
                if affected.iter().any(|a| source.name.contains(a)) && source.status.is_ok() {
                    source.status = Err(format!("{program} not attached: {why}"));
                }
            }
        }
        for (program, name) in raw_plan {
            let raw_tracepoint = raw_program(&mut ebpf, program)?;
            raw_tracepoint
                .load()
                .with_context(|| format!("load program {program} (verifier)"))?;
            links.push(attach_raw(raw_tracepoint, program, name)?);
            report.attached.push(format!("raw_tp:{name}"));
        }
        Ok(Self {
            ebpf,
            links,
            deferred,
            report,
        })
    }

    /// Attaches the deferred probes once the probes have seen an io_uring sync
    /// (`URING_SYNC_SEEN`); cheap to call often (one map read until then, nothing after).
    /// Returns whether it attached them now.
    pub fn attach_for_io_uring_syncs(&mut self) -> Result<bool> {
        if self.deferred.is_empty() {
            return Ok(false);
        }
        let seen = self
            .ebpf
            .map(URING_SYNC_SEEN)
            .and_then(|map| Array::<_, u32>::try_from(map).ok())
            .and_then(|array| array.get(&0, 0).ok())
            .unwrap_or(0);
        if seen == 0 {
            return Ok(false);
        }
        for deferred in std::mem::take(&mut self.deferred) {
            match deferred {
                Deferred::Raw { program, name } => {
                    let raw_tracepoint = raw_program(&mut self.ebpf, program)?;
                    self.links.push(attach_raw(raw_tracepoint, program, name)?);
                }
                Deferred::Classic {
                    program,
                    category,
                    name,
                } => {
                    let tracepoint = classic_program(&mut self.ebpf, program)?;
                    let link = tracepoint.attach(category, name).with_context(|| {
                        format!("attach {program} to tracepoint {category}:{name}")
                    })?;
                    self.links.push(Box::new(tracepoint.take_link(link)?));
                }
            }
        }
        Ok(true)
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
            dstate_episodes: match take(DSTATE_EPISODES)? {
                aya::maps::Map::Array(map) => episodes::EpisodeTableView::map(map)?,
                _ => bail!("map DSTATE_EPISODES is not an array"),
            },
            stacks: StackTraceMap::try_from(take(STACKS)?).context("map STACKS")?,
            dstate_time: PerCpuHashMap::try_from(take(DSTATE_TIME)?).context("map DSTATE_TIME")?,
            dio_stream_align: Array::try_from(take(DIO_STREAM_ALIGN)?)
                .context("map DIO_STREAM_ALIGN")?,
            dio_calls: PerCpuHashMap::try_from(take(DIO_CALL_TOTALS)?)
                .context("map DIO_CALL_TOTALS")?,
            dio_calls_in_flight: Array::try_from(take(DIO_CALLS_IN_FLIGHT)?)
                .context("map DIO_CALLS_IN_FLIGHT")?,
            dirty_pauses: PerCpuHashMap::try_from(take(DIRTY_PAUSES)?)
                .context("map DIRTY_PAUSES")?,
            call_latency_on: Array::try_from(take(CALL_LATENCY_ON)?)
                .context("map CALL_LATENCY_ON")?,
            sched_split_on: Array::try_from(take(SCHED_SPLIT_ON)?).context("map SCHED_SPLIT_ON")?,
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

fn find_tracepoint(
    tracefs: &Tracefs,
    attachment: &Attachment,
) -> Result<Option<(&'static str, &'static str, EventFormat)>> {
    for &(category, name) in attachment.candidates {
        if let Some(format) = tracefs.format(category, name)? {
            return Ok(Some((category, name, format)));
        }
    }
    Ok(None)
}

/// The offsets of the fields the probes read, checked for the sizes the probes assume.
pub fn field_offsets(format: &EventFormat) -> Result<FieldOffsets> {
    let find = |name: &str, sizes: &[u32]| -> Result<u32> {
        let window = WINDOW_START..WINDOW_START + WINDOW_LEN;
        match format.field(name) {
            None => Ok(ABSENT),
            Some(field)
                if !window.contains(&(field.offset as usize))
                    || field.offset as usize + field.size.min(RWBS_READ_LEN as u32) as usize
                        > window.end =>
            {
                bail!(
                    "tracepoint {}: field {name} at offset {} lies outside the bytes the probes read ({window:?})",
                    format.name,
                    field.offset
                )
            }
            Some(field) if name == "rwbs" && field.size as usize >= RWBS_READ_LEN => {
                Ok(field.offset)
            }
            // Numbers are read with single aligned loads: refuse a layout that misaligns them.
            Some(field) if sizes.contains(&field.size) && field.offset % field.size == 0 => {
                Ok(field.offset)
            }
            Some(field) if sizes.contains(&field.size) => bail!(
                "tracepoint {}: field {name} at offset {} is not {}-byte aligned",
                format.name,
                field.offset,
                field.size
            ),
            Some(field) => bail!(
                "tracepoint {}: field {name} is {} bytes, expected {sizes:?}",
                format.name,
                field.size
            ),
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
        bail!("tracepoint {} has no dev/sector fields", format.name);
    }
    Ok(offsets)
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones to the memory cgroup.
/// Raising the limit can fail without CAP_SYS_RESOURCE, which only matters on old kernels.
fn raise_memlock_limit(kernel: (u32, u32)) {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads a valid rlimit struct.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
    if rc != 0 && kernel < (5, 11) {
        eprintln!(
            "iotop-bpf: warning: cannot raise RLIMIT_MEMLOCK ({}); loading may fail on this kernel",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{tracefs::parse_format, *};

    fn fixture(kernel: &str, event: &str) -> EventFormat {
        let path = format!(
            "{}/tests/data/tracefs/{kernel}/{event}.format",
            env!("CARGO_MANIFEST_DIR")
        );
        parse_format(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn offsets_follow_the_kernel() {
        let new = field_offsets(&fixture("6.18", "block_rq_complete")).unwrap();
        assert_eq!(
            new,
            FieldOffsets {
                dev: 8,
                sector: 16,
                nr_sector: 24,
                bytes: ABSENT,
                error: 28,
                rwbs: 34
            }
        );
        let old = field_offsets(&fixture("6.5", "block_rq_complete")).unwrap();
        assert_eq!(old.rwbs, 32);
        let issue = field_offsets(&fixture("6.18", "block_rq_issue")).unwrap();
        assert_eq!((issue.bytes, issue.error), (28, ABSENT));
        let start = field_offsets(&fixture("6.18", "block_io_start")).unwrap();
        assert_eq!((start.dev, start.sector), (8, 16));
    }

    #[test]
    fn unexpected_field_sizes_are_refused() {
        let mut format = fixture("6.18", "block_rq_complete");
        format
            .fields
            .iter_mut()
            .find(|f| f.name == "sector")
            .unwrap()
            .size = 4;
        let err = field_offsets(&format).unwrap_err().to_string();
        assert!(err.contains("sector is 4 bytes"), "{err}");
        format.fields.retain(|f| f.name != "sector");
        assert!(field_offsets(&format).is_err());
        let mut moved = fixture("6.18", "block_rq_complete");
        moved
            .fields
            .iter_mut()
            .find(|f| f.name == "rwbs")
            .unwrap()
            .offset = 70;
        let err = field_offsets(&moved).unwrap_err().to_string();
        assert!(err.contains("outside the bytes the probes read"), "{err}");
    }
}
