//! iotop-bpf: a live, top-like dashboard of Linux storage I/O built on eBPF.
//!
//! Data flows one way: kernel probes -> ring buffer -> `feed` (decode, annotate) -> `model`
//! (pure) -> `model::Snapshot` -> `view` (TUI) | `report` (batch text, JSON). The
//! `pipeline` drives it for the commands in `front` (the live view, the batch reports, the
//! metrics daemon, the offline report, the demo), from the probes or from a recording; the
//! Prometheus `export`er taps the pipeline's snapshots.
//!
//! The binary (`main.rs`) only calls [`main`]: the command line is dispatched here, so every
//! module is `pub(crate)` and the compiler reports an item nobody uses instead of taking it
//! for API (no other crate imports this library).

pub(crate) mod cli;
pub(crate) mod clock;
pub(crate) mod export;
pub(crate) mod feed;
pub(crate) mod front;
#[cfg(test)]
mod fuzz;
pub(crate) mod generate;
pub(crate) mod heap;
pub(crate) mod history;
pub(crate) mod names;
pub(crate) mod pipeline;
pub(crate) mod probe;
pub(crate) mod report;
pub(crate) mod shutdown;
pub(crate) mod term;
pub(crate) mod units;
pub(crate) mod varint;
pub(crate) mod view;
pub(crate) mod viewers;
pub(crate) mod workload;

/// The pure model is its own crate (`model/`), so its purity is a compile-time fact; it is
/// named `model` here as it always was.
pub(crate) use iotop_bpf_model as model;

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser as _;

use crate::{
    cli::{Cli, Command, Serve},
    front::{app, attach, batch, demo, report_cmd, serve},
    pipeline::Pipeline,
    probe::{Probes, privilege},
};

/// The binary's `main`: the command line parsed and run, one line of error on failure.
pub fn main() -> ExitCode {
    if let Some(dir) = std::env::var_os(crate::generate::ENV) {
        return match crate::generate::generate(dir.as_ref()) {
            Ok(written) => {
                for path in written {
                    println!("{}", path.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("iotop-bpf: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear message, the chain of causes, no backtrace; a path or name it quotes
            // shown as every text output shows one.
            eprintln!("iotop-bpf: {}", names::show(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    match &cli.command {
        Some(Command::Workload(w)) => return crate::workload::run(w),
        Some(Command::Check(args)) => return check(args),
        Some(Command::Serve(args)) => return serve(args),
        // Reads a file: no privileges, no probes.
        Some(Command::Report(args)) => return report_cmd::run(&report_options(args)),
        Some(Command::Demo(args)) => return demo::run(&demo_options(args)),
        // Reads a socket: no privileges, no probes.
        Some(Command::Attach(args)) => return attach::run(&attach_options(args)),
        None => {}
    }
    // A bad or busy address fails before anything is loaded.
    let listener = cli.listen.map(crate::export::server::bind).transpose()?;
    // Headless reports publish nothing for viewers: they have no one to share a screen with.
    if cli.is_batch() && cli.viewers.given() {
        anyhow::bail!(
            "the --viewers-* options are for the live view and serve, not --batch or --json"
        );
    }
    let viewers = (!cli.is_batch())
        .then(|| crate::viewers::endpoint::bind(&cli.viewers.endpoint()))
        .transpose()?;
    // Replay needs no privileges; the live probes are checked before anything else.
    let env = if cli.replay.is_empty() {
        Some(privilege::check()?)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async {
        // The live view's screen first, the probes then (see `app::Starting`). If they cannot
        // be loaded, it is dropped, and the terminal given back, before the reason is printed.
        let starting = match (&env, cli.is_batch()) {
            (Some(env), false) => Some(app::Starting::enter(
                &view_options(cli),
                crate::pipeline::host_name(),
                env.kernel_release.clone(),
                cli.delay,
            )?),
            _ => None,
        };
        let mut pipeline = match &env {
            None => Pipeline::replay(&cli.replay, (!cli.is_batch()).then_some(cli.speed))?,
            Some(env) => Pipeline::live(
                env,
                cli.delay,
                cli.iterations,
                record_options(&cli.record).as_ref(),
            )?,
        };
        // Said at the end, once the terminal is back: what the recording did not keep.
        let recording = pipeline.recording();
        if let Some(listener) = listener {
            let addr = crate::export::attach(&mut pipeline, listener, cli.top)?;
            if cli.is_batch() {
                eprintln!("iotop-bpf: serving metrics on http://{addr}/metrics");
            }
        }
        if cli.is_batch() {
            let result =
                batch::run(&print_options(cli), pipeline, &mut std::io::stdout().lock()).await;
            say_recorded(recording.as_ref());
            return result;
        }
        // Kept to the end: dropping it removes the socket.
        let published = viewers
            .map(|bound| crate::viewers::publish::publish(&mut pipeline, bound, "the live view"))
            .transpose()?;
        // `attach` finds the socket on its own; a TCP token, or why nothing is published,
        // is said on the key line, and after the view on the terminal (the screen is up).
        let lines: Vec<String> = published
            .as_ref()
            .map(|p| p.tcp_line().into_iter().chain(p.note.clone()).collect())
            .unwrap_or_default();
        let startup = (!lines.is_empty()).then(|| lines.join("; "));
        let result = app::run(&view_options(cli), pipeline, starting, startup).await;
        for line in &lines {
            eprintln!("iotop-bpf: {}", names::show(line));
        }
        say_recorded(recording.as_ref());
        drop(published);
        result
    })
}

fn serve(args: &Serve) -> Result<()> {
    let listener = crate::export::server::bind(args.listen)?;
    let viewers = crate::viewers::endpoint::bind(&args.viewers.endpoint())?;
    let env = privilege::check()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async {
        let mut pipeline = Pipeline::live(
            &env,
            args.delay,
            None,
            record_options(&args.record).as_ref(),
        )?;
        let recording = pipeline.recording();
        let addr = crate::export::attach(&mut pipeline, listener, args.top)?;
        eprintln!("iotop-bpf: serving metrics on http://{addr}/metrics");
        let published = crate::viewers::publish::publish(&mut pipeline, viewers, "serve")?;
        for line in published.describe() {
            eprintln!("iotop-bpf: {}", names::show(&line));
        }
        if let Some(note) = &published.note {
            eprintln!("iotop-bpf: {}", names::show(note));
        }
        let result = serve::run(pipeline).await;
        drop(published);
        say_recorded(recording.as_ref());
        result
    })
}

// The command line turned into each command's options: here, not in `cli.rs`, so the
// commands (`front`) and the command line do not import each other (with `cli` importing
// `front`, `workload` and `generate` would sit an eighth floor up).

/// At the end of a run: what the recording did not keep (why it stopped, what it left out).
fn say_recorded(recording: Option<&crate::feed::recording::Watch>) {
    if let Some(line) = recording.and_then(crate::feed::recording::Watch::exit_line) {
        eprintln!("iotop-bpf: {}", names::show(&line));
    }
}

/// `--record` and `--record-max`.
fn record_options(args: &cli::Record) -> Option<crate::feed::recording::Options> {
    args.record
        .as_ref()
        .map(|path| crate::feed::recording::Options {
            path: path.clone(),
            max: args.record_max,
        })
}

/// What the live view is given.
fn view_options(cli: &Cli) -> app::ViewOptions {
    app::ViewOptions {
        pids: cli.pids.clone(),
        replay: cli.replay.first().cloned(),
        iterations: cli.iterations,
    }
}

/// What `--batch` and `--json` are given.
fn print_options(cli: &Cli) -> batch::PrintOptions {
    batch::PrintOptions {
        json: cli.json,
        pids: cli.pids.clone(),
        max_procs: cli.max_procs,
        iterations: cli.iterations,
    }
}

fn report_options(args: &cli::Report) -> report_cmd::Options {
    report_cmd::Options {
        recording: args.recording.clone(),
        output: args.output.clone(),
        disk: args.disk.clone(),
        pid: args.pid,
        latency: args.latency.map(|latency| match latency {
            cli::HeatLatency::Total => report_cmd::HeatLatency::Total,
            cli::HeatLatency::Queue => report_cmd::HeatLatency::Queue,
            cli::HeatLatency::Device => report_cmd::HeatLatency::Device,
            cli::HeatLatency::Sync => report_cmd::HeatLatency::Sync,
        }),
        top: args.top,
    }
}

fn demo_options(args: &cli::Demo) -> demo::Options {
    demo::Options {
        step_seconds: args.step_seconds,
        batch: args.batch,
        only: args.only.clone(),
        delay: args.delay,
    }
}

fn attach_options(args: &cli::Attach) -> attach::Options {
    attach::Options {
        target: args.target.clone(),
        token: args.token.clone(),
    }
}

fn check(args: &cli::Check) -> Result<()> {
    let env = privilege::check()?;
    if args.facts {
        let facts = crate::probe::facts::KernelFacts::gather(
            env.kernel_release.clone(),
            env.tracefs.clone(),
        );
        // Every question the plan asks is recorded as it is answered: plan every way the
        // tests will (classic tracepoints forced, perf_event_open refused) to record them all.
        use crate::probe::plan::{self, Options};
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
        if let Err(e) = plan::plan(&facts, crate::probe::options_from_env()) {
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
    if let Some(lockdown) = crate::probe::facts::lockdown_here() {
        say(format!("lockdown: {lockdown}"));
    }
    match &env.tracefs {
        Ok(tracefs) => say(format!("tracefs: {}", names::path(tracefs.root()))),
        Err(why) => say(format!("tracefs: not used ({why})")),
    }
    let probes = Probes::start(&env)?;
    say(format!("probes: {}", probes.report.mode));
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
