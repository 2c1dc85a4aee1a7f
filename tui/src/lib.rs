//! iotop-bpf: a live, top-like dashboard of Linux storage I/O built on eBPF.
//!
//! Data flows one way: kernel probes -> ring buffer -> `feed` (decode, annotate) -> `model`
//! (pure) -> `model::Snapshot` -> `view` (TUI) | `report` (batch text, JSON). The
//! `pipeline` drives it for the commands in `front` (the live view, the batch reports, the
//! metrics daemon, the offline report, the demo), from the probes or from a recording; the
//! Prometheus `export`er taps the pipeline's snapshots.
//!
//! This file is the table of contents: the modules, the dispatch, and the command line turned
//! into each command's options; every command's body is whole in its own file of `front`.
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
pub(crate) mod recording;
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

use anyhow::Result;
use clap::Parser as _;

use crate::{
    cli::{Cli, Command, Serve},
    front::{app, attach, batch, check, demo, report_cmd, serve, watch},
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
        Some(Command::Check(args)) => return check::run(&check_options(args)),
        Some(Command::Serve(args)) => return serve::command(&serve_options(args)),
        // Reads a file: no privileges, no probes.
        Some(Command::Report(args)) => return report_cmd::run(&report_options(args)),
        Some(Command::Demo(args)) => return demo::run(&demo_options(args)),
        // Reads a socket: no privileges, no probes.
        Some(Command::Attach(args)) => return attach::run(&attach_options(args)),
        None => {}
    }
    watch::run(&watch_options(cli))
}

// The command line turned into each command's options: here, not in `cli.rs`, so the
// commands (`front`) and the command line do not import each other (with `cli` importing
// `front`, `workload` and `generate` would sit an eighth floor up).

/// `--record` and `--record-max`.
fn record_options(args: &cli::Record) -> Option<crate::recording::Options> {
    args.record.as_ref().map(|path| crate::recording::Options {
        path: path.clone(),
        max: args.record_max,
    })
}

/// What the default command (the live view, `--batch`, `--json`, `--replay`) is given.
fn watch_options(cli: &Cli) -> watch::Options {
    watch::Options {
        listen: cli.listen,
        viewers: cli.viewers.endpoint(),
        viewers_given: cli.viewers.given(),
        batch: cli.is_batch(),
        replay: cli.replay.clone(),
        speed: cli.speed,
        delay: cli.delay,
        iterations: cli.iterations,
        record: record_options(&cli.record),
        top: cli.top,
        view: view_options(cli),
        print: print_options(cli),
    }
}

fn serve_options(args: &Serve) -> serve::Options {
    serve::Options {
        listen: args.listen,
        viewers: args.viewers.endpoint(),
        delay: args.delay,
        top: args.top,
        record: record_options(&args.record),
    }
}

fn check_options(args: &cli::Check) -> check::Options {
    check::Options {
        facts: args.facts,
        verbose: args.verbose,
    }
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
