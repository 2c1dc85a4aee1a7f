use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser as _;
use iotop_bpf::{
    app,
    cli::{Cli, Command},
    headless,
    probe::{Probes, privilege},
    replay, workload,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear message, the chain of causes, no backtrace.
            eprintln!("iotop-bpf: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    match &cli.command {
        Some(Command::Workload(w)) => return workload::run(w),
        Some(Command::Check) => return check(),
        None => {}
    }
    if let Some(path) = &cli.replay {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("start the async runtime")?;
        return if cli.is_batch() {
            replay::run_headless(cli, path, &mut std::io::stdout().lock())
        } else {
            runtime.block_on(app::replay(cli, path))
        };
    }
    let env = privilege::check()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    if cli.is_batch() {
        runtime.block_on(headless::run(cli, &env, &mut std::io::stdout().lock()))
    } else {
        runtime.block_on(app::run(cli, &env))
    }
}

fn check() -> Result<()> {
    let env = privilege::check()?;
    println!("kernel: {}", env.kernel_release);
    println!("tracefs: {}", env.tracefs.root().display());
    let probes = Probes::load(&env)?;
    println!("probes: {}", probes.report.mode);
    for tp in &probes.report.attached {
        println!("attached: {tp}");
    }
    for note in &probes.report.degraded {
        println!("degraded: {note}");
    }
    println!(
        "not covered: io_uring IORING_OP_FSYNC (tracing every io_uring completion would cost every io_uring I/O)"
    );
    println!("ok");
    Ok(())
}
