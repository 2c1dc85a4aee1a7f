//! `iotop-bpf check`: what this kernel supports and what is degraded, with the reason; with
//! `--facts`, the kernel's answers to every question the plan asks, as the tests' fixtures.

use anyhow::Result;
use iotop_bpf_probe::{Probes, privilege};

use crate::names;

/// What `check` is given.
pub struct Options {
    /// The kernel's facts as JSON (a fixture for the plan's tests), not the report.
    pub facts: bool,
    /// Each refused program's verifier log in full.
    pub verbose: bool,
}

pub fn run(args: &Options) -> Result<()> {
    let env = privilege::check()?;
    if args.facts {
        let facts = iotop_bpf_probe::facts::KernelFacts::gather(
            env.kernel_release.clone(),
            env.tracefs.clone(),
        );
        // Every question the plan asks is recorded as it is answered: plan every way the
        // tests will (classic tracepoints forced, perf_event_open refused) to record them all.
        use iotop_bpf_probe::plan::{self, Options};
        let mut facts = facts;
        let access = facts.access.clone();
        facts.access.perf_event_open = Err("refused, to record the raw-only plan".into());
        let _ = plan::plan(&facts, Options::default());
        facts.access = access;
        let _ = plan::plan(
            &facts,
            Options {
                classic: true,
                ..Options::default()
            },
        );
        if let Err(e) = plan::plan(&facts, iotop_bpf_probe::plan::options_from_env()) {
            eprintln!(
                "iotop-bpf: note: the plan fails here: {}",
                names::show(&e.to_string())
            );
        }
        println!("{}", facts.to_json());
        return Ok(());
    }
    // Every line shown as names are: paths (tracefs, mount points) and the kernel's words.
    let say = |line: String| {
        for line in line.lines() {
            println!("{}", names::show(line));
        }
    };
    say(format!("kernel: {}", env.kernel_release));
    if let Some(lockdown) = iotop_bpf_probe::facts::lockdown_here() {
        say(format!("lockdown: {lockdown}"));
    }
    match &env.tracefs {
        Ok(tracefs) => say(format!("tracefs: {}", names::path(tracefs.root()))),
        Err(why) => say(format!("tracefs: not used ({why})")),
    }
    let probes = Probes::start(&env)?;
    say(format!("probes: {}", probes.report.mode));
    say(format!("system calls: {}", probes.report.syscall_path));
    for tp in &probes.report.attached {
        say(format!("attached: {tp}"));
    }
    for note in probes
        .report
        .degraded
        .iter()
        .chain(&crate::feed::host::notes())
    {
        say(format!("degraded: {note}"));
    }
    say(format!(
        "direct I/O call latency (the wait before the request): {}",
        crate::feed::CallLatencyMode::from_env().describe()
    ));
    for source in &probes.report.sync_sources {
        match &source.status {
            Ok(how) => say(format!("sync source: {}: {how}", source.name)),
            Err(why) => say(format!("sync source: {}: NOT COVERED: {why}", source.name)),
        }
    }
    for (program, log) in &probes.report.refused {
        if args.verbose {
            say(format!("\nverifier log of {program}:\n{log}"));
        } else {
            say(format!(
                "refused: {program} (its verifier log: iotop-bpf check --verbose)"
            ));
        }
    }
    say("ok".to_string());
    Ok(())
}
