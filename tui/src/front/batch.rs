//! `--batch` and `--json`: the pipeline's intervals printed as text or NDJSON, live or from a
//! recording.

use std::io::Write;

use anyhow::{Context as _, Result};

use crate::{
    cli::Cli,
    clock,
    model::Snapshot,
    pipeline::{Pipeline, RunInfo, Step},
    report::{json, text},
    shutdown::Shutdown,
};

/// Prints every interval until the source ends, `-n` intervals were printed, or a signal
/// arrives (then the partial interval is printed, so nothing seen before it is lost).
pub async fn run(cli: &Cli, mut pipeline: Pipeline, out: &mut impl Write) -> Result<()> {
    let mut shutdown = Shutdown::install().context("install signal handlers")?;
    let notes = pipeline.notes();
    for note in &notes {
        eprintln!("iotop-bpf: degraded: {note}");
    }
    let mut printed = 0u64;
    loop {
        tokio::select! {
            biased;
            () = shutdown.recv() => {
                if let Some(snap) = pipeline.finish()? {
                    print(cli, &snap, pipeline.info(), &notes, out)?;
                }
                break;
            }
            step = pipeline.next() => match step? {
                Step::Interval(snap) => {
                    if !print(cli, &snap, pipeline.info(), &notes, out)? {
                        break; // stdout closed (e.g. `| head`)
                    }
                    printed += 1;
                    if cli.iterations.is_some_and(|n| printed >= n) {
                        break;
                    }
                }
                Step::End => break,
            },
        }
    }
    Ok(())
}

/// Writes one report; `Ok(false)` when the reader went away.
/// `notes`: what is degraded in this run (in every JSON line, so each stands alone).
pub fn print(
    cli: &Cli,
    snap: &Snapshot,
    info: &RunInfo,
    notes: &[String],
    out: &mut impl Write,
) -> Result<bool> {
    let at = info.unix_ms(snap);
    let body = if cli.json {
        json::to_line(
            snap,
            clock::rfc3339(at),
            json::Bounds {
                pids: &cli.pids,
                max_procs: cli.max_procs,
            },
            notes,
        ) + "\n"
    } else {
        text::interval(snap, &clock::time_of_day(at), &cli.pids, cli.max_procs) + "\n"
    };
    match out.write_all(body.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("write the report"),
    }
}
