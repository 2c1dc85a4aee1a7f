//! `--batch` and `--json`: the pipeline's intervals printed as text or NDJSON, live or from a
//! recording.

use std::io::Write;

use anyhow::{Context as _, Result};

use crate::{
    clock,
    model::Snapshot,
    pipeline::{Pipeline, RunInfo, Step},
    report::{json, text},
    shutdown::Shutdown,
};

/// What `--batch` and `--json` print (from the command line, or the demo's own).
#[derive(Clone, Debug)]
pub struct PrintOptions {
    /// `--json`: NDJSON rather than text.
    pub json: bool,
    /// `-p`: only these processes.
    pub pids: Vec<u32>,
    /// `--procs`: processes listed per interval, the rest summed in one row.
    pub max_procs: usize,
    /// `-n`: intervals to print before stopping.
    pub iterations: Option<u64>,
}

/// Prints every interval until the source ends, `-n` intervals were printed, or a signal
/// arrives (then the partial interval is printed, so nothing seen before it is lost).
pub async fn run(
    options: &PrintOptions,
    mut pipeline: Pipeline,
    out: &mut impl Write,
) -> Result<()> {
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
                    print(options, &snap, pipeline.info(), &notes, out)?;
                }
                break;
            }
            step = pipeline.next() => match step? {
                Step::Interval(snap) => {
                    if !print(options, &snap, pipeline.info(), &notes, out)? {
                        break; // stdout closed (e.g. `| head`)
                    }
                    printed += 1;
                    if options.iterations.is_some_and(|n| printed >= n) {
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
    options: &PrintOptions,
    snap: &Snapshot,
    info: &RunInfo,
    notes: &[String],
    out: &mut impl Write,
) -> Result<bool> {
    let at = info.unix_ms(snap);
    let body = if options.json {
        json::to_line(
            snap,
            clock::rfc3339(at),
            json::Bounds {
                pids: &options.pids,
                max_procs: options.max_procs,
            },
            notes,
        ) + "\n"
    } else {
        text::interval(
            snap,
            &clock::time_of_day(at),
            &options.pids,
            options.max_procs,
        ) + "\n"
    };
    match out.write_all(body.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("write the report"),
    }
}
