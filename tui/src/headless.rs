//! `--batch` and `--json`: the same pipeline as the live view, printed every interval.

use std::io::Write;

use anyhow::{Context as _, Result};
use tokio::time::{Instant, MissedTickBehavior, interval, interval_at};

use crate::{
    cli::Cli,
    decode::Record,
    feed::{
        LiveFeed,
        recording::{self, Recorder},
    },
    model::{Aggregator, Settings, Snapshot},
    probe::privilege::Environment,
    report::{self, json, text},
    shutdown::Shutdown,
};

/// How often the ring buffer is drained between reports.
pub const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
/// Records taken per drain before the loop looks at signals and timers again.
pub const MAX_BATCH: usize = 65_536;

/// The live pipeline: probes -> model, recorded on the way when asked.
pub struct Pipeline {
    pub feed: LiveFeed,
    pub model: Aggregator,
    recorder: Option<Recorder>,
    started_unix_ms: u64,
}

impl Pipeline {
    /// Attaches the probes (and opens the recording). Must run inside a tokio runtime.
    pub fn start(cli: &Cli, env: &Environment) -> Result<Self> {
        let feed = LiveFeed::start(env)?;
        let model = Aggregator::new(Settings::default(), feed.started_ns());
        let started_unix_ms = report::unix_ms_now();
        let recorder = match &cli.record {
            Some(path) => {
                let interval_ns = u64::try_from(cli.delay.as_nanos()).unwrap_or(u64::MAX);
                let header = recording::new_header(
                    crate::app::host_name(),
                    env.kernel_release.clone(),
                    feed.started_ns(),
                    started_unix_ms,
                    interval_ns,
                );
                Some(Recorder::create(path, &header)?)
            }
            None => None,
        };
        Ok(Self {
            feed,
            model,
            recorder,
            started_unix_ms,
        })
    }

    /// Empties the ring buffer into the model.
    pub fn drain(&mut self) -> Result<()> {
        let Self {
            feed,
            model,
            recorder,
            ..
        } = self;
        let mut failed = None;
        let mut sink = |record: Result<Record, _>| match record {
            Ok(record) => {
                if let Some(recorder) = recorder.as_mut()
                    && let Err(e) = recorder.record(&record)
                {
                    failed.get_or_insert(e);
                }
                ingest(model, &record);
            }
            Err(_) => model.note_bad_record(),
        };
        while feed.drain(MAX_BATCH, &mut sink) == MAX_BATCH {}
        failed.map_or(Ok(()), Err)
    }

    /// Drains, samples the kernel maps and closes the interval. `last` settles every pending
    /// journal charge first (the final report before exiting).
    pub fn close_interval(&mut self, last: bool) -> Result<Snapshot> {
        self.drain()?;
        if last {
            self.model.settle_all(crate::feed::monotonic_ns());
        }
        let sample = self.feed.sample();
        if let Some(recorder) = &mut self.recorder {
            recorder.sample(&sample)?;
        }
        Ok(self.model.tick(&sample))
    }

    /// Wall-clock time of a snapshot (for the report's `ts`).
    pub fn unix_ms(&self, snap: &Snapshot) -> u64 {
        self.started_unix_ms + snap.elapsed_ns / 1_000_000
    }
}

/// Feeds one decoded record to the model.
pub fn ingest(model: &mut Aggregator, record: &Record) {
    match record {
        Record::Block(io) => model.ingest(io),
        Record::Sync(call) => model.ingest_sync(call),
        Record::DState(episode) => model.ingest_dstate(episode),
        Record::Dio(call) => model.ingest_dio(call),
    }
}

pub async fn run(cli: &Cli, env: &Environment, out: &mut impl Write) -> Result<()> {
    let mut shutdown = Shutdown::install().context("install signal handlers")?;
    let mut pipeline = Pipeline::start(cli, env)?;
    for note in &pipeline.feed.report().degraded {
        eprintln!("iotop-bpf: degraded: {note}");
    }
    let mut reports = interval_at(Instant::now() + cli.delay, cli.delay);
    reports.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut drains = interval(DRAIN_EVERY);
    drains.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut printed = 0u64;

    loop {
        tokio::select! {
            biased;
            () = shutdown.recv() => {
                // Report the partial interval, so nothing seen before the signal is lost.
                let snap = pipeline.close_interval(true)?;
                print(cli, &snap, pipeline.unix_ms(&snap), out)?;
                break;
            }
            _ = reports.tick() => {
                let last = cli.iterations.is_some_and(|n| printed + 1 >= n);
                let snap = pipeline.close_interval(last)?;
                if !print(cli, &snap, pipeline.unix_ms(&snap), out)? {
                    break; // stdout closed (e.g. `| head`)
                }
                printed += 1;
                if last {
                    break;
                }
            }
            filling = pipeline.feed.filling() => {
                filling.context("wait for the ring buffer")?;
                pipeline.drain()?;
            }
            _ = drains.tick() => pipeline.drain()?,
        }
    }
    Ok(())
}

/// Writes one report; `Ok(false)` when the reader went away.
pub fn print(cli: &Cli, snap: &Snapshot, unix_ms: u64, out: &mut impl Write) -> Result<bool> {
    let body = if cli.json {
        json::to_line(snap, report::rfc3339(unix_ms), &cli.pids) + "\n"
    } else {
        let ts = report::rfc3339(unix_ms);
        text::interval(snap, &ts[11..19], &cli.pids) + "\n"
    };
    match out.write_all(body.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("write the report"),
    }
}
