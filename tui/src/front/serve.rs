//! `iotop-bpf serve`: no screen, no report; the pipeline runs so that the exporter (attached
//! to it beforehand) has a fresh interval for every scrape, and the recording (`--record`,
//! rotated within `--record-max`) its events, until SIGINT/SIGTERM/SIGHUP.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context as _, Result};
use iotop_bpf_probe::privilege;

use crate::{
    model::Snapshot,
    pipeline::{self, Flow, Front, Pipeline},
    recording::Watch,
    shutdown::Shutdown,
};

/// What `serve` is given.
pub struct Options {
    pub listen: SocketAddr,
    pub viewers: crate::viewers::endpoint::Options,
    pub delay: Duration,
    pub top: usize,
    pub record: Option<crate::recording::Options>,
}

/// The whole command: the metrics' port and the viewers' socket bound before anything is
/// loaded (a port in use fails at once), then the probes, until a signal.
pub fn command(args: &Options) -> Result<()> {
    let listener = crate::export::server::bind(args.listen)?;
    let viewers = crate::viewers::endpoint::bind(&args.viewers)?;
    let env = privilege::check()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async {
        let mut pipeline = Pipeline::live(&env, args.delay, None, args.record.as_ref())?;
        let recording = pipeline.recording();
        let addr = crate::export::attach(&mut pipeline, listener, args.top)?;
        eprintln!("iotop-bpf: serving metrics on http://{addr}/metrics");
        let published = crate::viewers::publish::publish(&mut pipeline, viewers, "serve")?;
        for line in published.describe() {
            eprintln!("iotop-bpf: {}", crate::names::show(&line));
        }
        if let Some(note) = &published.note {
            eprintln!("iotop-bpf: {}", crate::names::show(note));
        }
        let result = run(pipeline).await;
        drop(published);
        super::say_recorded(recording.as_ref());
        result
    })
}

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
