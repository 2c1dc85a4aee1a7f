//! `--batch` and `--json`: the pipeline's intervals printed as text or NDJSON, live or from a
//! recording.

use std::io::Write;

use anyhow::{Context as _, Result};

use crate::{
    clock,
    model::Snapshot,
    pipeline::{self, Flow, Front, Pipeline, RunInfo},
    recording::Watch,
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

/// Prints every interval until the source ends, `-n` intervals were printed, the reader went
/// away, or a signal arrives (then the partial interval is printed, so nothing seen before it
/// is lost): the pipeline's one loop, [`pipeline::drive`].
pub async fn run(
    options: &PrintOptions,
    mut pipeline: Pipeline,
    out: &mut impl Write,
) -> Result<()> {
    let shutdown = Shutdown::install().context("install signal handlers")?;
    let notes = pipeline.notes();
    for note in &notes {
        eprintln!("iotop-bpf: degraded: {}", crate::names::show(note));
    }
    let mut printer = Printer {
        options,
        info: pipeline.info().clone(),
        notes,
        out,
        printed: 0,
        shutdown,
        recording: pipeline.recording(),
        said_stopped: false,
    };
    pipeline::drive(&mut pipeline, &mut printer).await?;
    super::replay_ended(&pipeline, printer.printed)
}

/// `--batch` and `--json` as the pipeline's front end.
struct Printer<'a, W> {
    options: &'a PrintOptions,
    info: RunInfo,
    notes: Vec<String>,
    out: &'a mut W,
    printed: u64,
    shutdown: Shutdown,
    recording: Option<Watch>,
    /// The recording's stop was said on stderr (once).
    said_stopped: bool,
}

impl<W> Printer<'_, W> {
    /// The recording's state for this interval's report; its stop said once on stderr, as
    /// it happens.
    fn recording(&mut self) -> json::Recording {
        let Some(watch) = &self.recording else {
            return json::Recording::default();
        };
        let state = watch.state();
        let stopped = watch.stopped();
        if let Some(stopped) = &stopped
            && !std::mem::replace(&mut self.said_stopped, true)
        {
            eprintln!(
                "iotop-bpf: recording {}; the reports go on",
                crate::names::show(stopped)
            );
        }
        json::Recording {
            recording: stopped,
            recording_dropped: state.dropped,
        }
    }
}

impl<W: Write> Printer<'_, W> {
    /// Prints one interval with the recording's state; false once stdout is closed.
    fn print(&mut self, snap: &Snapshot) -> Result<bool> {
        let recording = self.recording();
        print(
            self.options,
            snap,
            &self.info,
            &self.notes,
            &recording,
            self.out,
        )
    }
}

impl<W: Write> Front for Printer<'_, W> {
    async fn other(&mut self) -> Result<Flow> {
        self.shutdown.recv().await;
        Ok(Flow::Stop)
    }

    fn interval(&mut self, snap: Box<Snapshot>) -> Result<Flow> {
        if !self.print(&snap)? {
            return Ok(Flow::Stop); // stdout closed (e.g. `| head`)
        }
        self.printed += 1;
        Ok(
            if self.options.iterations.is_some_and(|n| self.printed >= n) {
                Flow::Stop
            } else {
                Flow::Continue
            },
        )
    }

    fn last(&mut self, snap: Box<Snapshot>) -> Result<()> {
        self.print(&snap).map(drop)
    }
}

/// Writes one report; `Ok(false)` when the reader went away.
/// `notes`: what is degraded in this run; `recording`: the recording's state when it is not
/// as it should be (both in every JSON line, so that each stands alone).
pub fn print(
    options: &PrintOptions,
    snap: &Snapshot,
    info: &RunInfo,
    notes: &[String],
    recording: &json::Recording,
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
            recording,
        ) + "\n"
    } else {
        let mut text = text::interval(
            snap,
            &clock::time_of_day(at),
            &options.pids,
            options.max_procs,
        );
        if let Some(stopped) = &recording.recording {
            text.push_str(&format!("recording {}\n", crate::names::show(stopped)));
        }
        text + "\n"
    };
    match out.write_all(body.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("write the report"),
    }
}
