//! `iotop-bpf serve`: no screen, no report; the pipeline runs so that the exporter (attached
//! to it beforehand) has a fresh interval for every scrape, until SIGINT/SIGTERM/SIGHUP.

use anyhow::{Context as _, Result};

use crate::{
    pipeline::{Pipeline, Step},
    shutdown::Shutdown,
};

pub async fn run(mut pipeline: Pipeline) -> Result<()> {
    let mut shutdown = Shutdown::install().context("install signal handlers")?;
    for note in pipeline.notes() {
        eprintln!("iotop-bpf: degraded: {note}");
    }
    loop {
        tokio::select! {
            biased;
            () = shutdown.recv() => break,
            step = pipeline.next() => if let Step::End = step? {
                break;
            },
        }
    }
    Ok(())
}
