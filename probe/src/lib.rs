//! iotop-bpf's loader, the only user-space crate with aya: the eBPF object (built by
//! `build.rs`, embedded here), the kernel's facts ([`facts`]), the plan made of them
//! ([`plan`]), and the probes loaded and attached as the plan says, one program at a time: a
//! program the kernel refuses degrades its part with a one-line reason (the whole verifier
//! log goes to `iotop-bpf check --verbose`); only the block probes are required. The live
//! feed reads the probes' maps through [`maps::ProbeMaps`] and writes them through
//! [`control::Knobs`].

pub mod access;
mod attach;
pub mod btf;
pub mod control;
mod episodes;
pub mod facts;
pub mod maps;
pub mod plan;
pub mod privilege;
pub mod report;
mod stuck;
pub mod tracefs;

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{Btf, Ebpf, EbpfLoader};

use self::{
    access::Access,
    attach::{attach_all, report_refusals, set_globals},
    facts::KernelFacts,
    plan::{Plan, Step},
    privilege::Environment,
    report::ProbeReport,
};

/// The compiled eBPF object, embedded at build time (empty when built with AYA_BUILD_SKIP).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/iotop-bpf"));

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

impl Probes {
    /// Asks the kernel what the plan needs, plans, loads and attaches: what `check`, the
    /// live view and every headless mode start with.
    pub fn start(env: &Environment) -> Result<Self> {
        // aya's loader parses the kernel's BTF too when it is made (~15 ms here, more on a
        // busy host): let it do that on the other core while this one reads ours.
        // With our own copy for the tp_btf programs (the loader keeps its own private).
        let loader = std::thread::spawn(|| (EbpfLoader::new(), Btf::from_sys_fs().ok()));
        let facts = KernelFacts::gather(env.kernel_release.clone(), env.tracefs.clone());
        let plan = plan::plan(&facts, plan::options_from_env()).map_err(|e| anyhow!(e))?;
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

    /// The probes' BPF run time (ns) and runs, summed over every program since it was
    /// loaded: what the kernel counted while its run-time statistics were on (see
    /// [`control::enable_run_time_stats`]).
    pub fn run_time(&self) -> (u64, u64) {
        let (mut run_ns, mut runs) = (0u64, 0u64);
        for (_, program) in self.ebpf.programs() {
            if let Ok(info) = program.info() {
                run_ns = run_ns
                    .saturating_add(u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX));
                runs = runs.saturating_add(info.run_count());
            }
        }
        (run_ns, runs)
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
