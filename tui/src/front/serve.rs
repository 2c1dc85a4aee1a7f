//! `iotop-bpf serve`: no screen, no report; the pipeline runs so that the exporter (attached
//! to it beforehand) has a fresh interval for every scrape, and the recording (`--record`,
//! rotated within `--record-max`) its events, until SIGINT/SIGTERM/SIGHUP.

use anyhow::{Context as _, Result};

use crate::{
    feed::recording::Watch,
    model::Snapshot,
    pipeline::{self, Flow, Front, Pipeline},
    shutdown::Shutdown,
};

pub async fn run(mut pipeline: Pipeline) -> Result<()> {
    let shutdown = Shutdown::install().context("install signal handlers")?;
    for note in pipeline.notes() {
        eprintln!("iotop-bpf: degraded: {}", crate::names::show(&note));
    }
    let mut serving = Serving {
        shutdown,
        recording: pipeline.recording(),
    };
    // The exporter and the viewers are taps: each interval reaches them before it comes here.
    pipeline::drive(&mut pipeline, &mut serving).await
}

/// `serve` as the pipeline's front end: nothing to do with an interval but say, once, that
/// the recording stopped (the metrics go on), until a signal.
struct Serving {
    shutdown: Shutdown,
    /// Taken once its stop is said.
    recording: Option<Watch>,
}

impl Front for Serving {
    async fn other(&mut self) -> Result<Flow> {
        self.shutdown.recv().await;
        Ok(Flow::Stop)
    }

    fn interval(&mut self, _snap: Box<Snapshot>) -> Result<Flow> {
        if let Some(stopped) = self.recording.as_ref().and_then(Watch::stopped) {
            eprintln!(
                "iotop-bpf: recording {}; the metrics and viewers go on",
                crate::names::show(&stopped)
            );
            self.recording = None;
        }
        Ok(Flow::Continue)
    }
}
