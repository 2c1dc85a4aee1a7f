//! `iotop-bpf serve`: no screen, no report; the pipeline runs so that the exporter (attached
//! to it beforehand) has a fresh interval for every scrape, until SIGINT/SIGTERM/SIGHUP.

use anyhow::{Context as _, Result};

use crate::{
    model::Snapshot,
    pipeline::{self, Flow, Front, Pipeline},
    shutdown::Shutdown,
};

pub async fn run(mut pipeline: Pipeline) -> Result<()> {
    let shutdown = Shutdown::install().context("install signal handlers")?;
    for note in pipeline.notes() {
        eprintln!("iotop-bpf: degraded: {}", crate::names::show(&note));
    }
    // The exporter and the viewers are taps: each interval reaches them before it comes here.
    pipeline::drive(&mut pipeline, &mut Serving(shutdown)).await
}

/// `serve` as the pipeline's front end: nothing to do with an interval, until a signal.
struct Serving(Shutdown);

impl Front for Serving {
    async fn other(&mut self) -> Result<Flow> {
        self.0.recv().await;
        Ok(Flow::Stop)
    }

    fn interval(&mut self, _snap: Box<Snapshot>) -> Result<Flow> {
        Ok(Flow::Continue)
    }
}
