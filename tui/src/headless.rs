//! `--batch` and `--json`: the same pipeline as the live view, printed every interval.

use std::io::Write;

use anyhow::{Context as _, Result};
use tokio::time::{Instant, MissedTickBehavior, interval, interval_at};

use crate::{
    cli::Cli,
    feed::LiveFeed,
    model::{Aggregator, Settings, Snapshot},
    probe::privilege::Environment,
    report::{self, json, text},
    shutdown::Shutdown,
};

/// How often the ring buffer is drained between reports.
pub const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
/// Records taken per drain before the loop looks at signals and timers again.
pub const MAX_BATCH: usize = 65_536;

pub async fn run(cli: &Cli, env: &Environment, out: &mut impl Write) -> Result<()> {
    let mut shutdown = Shutdown::install().context("install signal handlers")?;
    let mut feed = LiveFeed::start(env)?;
    for note in &feed.report().degraded {
        eprintln!("iotop-bpf: degraded: {note}");
    }
    let mut model = Aggregator::new(Settings::default(), feed.started_ns());
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
                drain_all(&mut feed, &mut model);
                model.settle_all(crate::feed::monotonic_ns());
                print(cli, &model.tick(&feed.sample()), out)?;
                break;
            }
            _ = reports.tick() => {
                drain_all(&mut feed, &mut model);
                let last = cli.iterations.is_some_and(|n| printed + 1 >= n);
                if last {
                    model.settle_all(crate::feed::monotonic_ns());
                }
                if !print(cli, &model.tick(&feed.sample()), out)? {
                    break; // stdout closed (e.g. `| head`)
                }
                printed += 1;
                if cli.iterations.is_some_and(|n| printed >= n) {
                    break;
                }
            }
            filling = feed.filling() => {
                filling.context("wait for the ring buffer")?;
                drain_all(&mut feed, &mut model);
            }
            _ = drains.tick() => drain_all(&mut feed, &mut model),
        }
    }
    Ok(())
}

/// Empties the ring buffer into the model.
pub fn drain_all(feed: &mut LiveFeed, model: &mut Aggregator) {
    let mut sink = |record| match record {
        Ok(crate::decode::Record::Block(io)) => model.ingest(&io),
        Ok(crate::decode::Record::Sync(call)) => model.ingest_sync(&call),
        Ok(crate::decode::Record::DState(episode)) => model.ingest_dstate(&episode),
        Ok(crate::decode::Record::Dio(call)) => model.ingest_dio(&call),
        Err(_) => model.note_bad_record(),
    };
    while feed.drain(MAX_BATCH, &mut sink) == MAX_BATCH {}
}

/// Writes one report; `Ok(false)` when the reader went away.
fn print(cli: &Cli, snap: &Snapshot, out: &mut impl Write) -> Result<bool> {
    let unix_ms = report::unix_ms_now();
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
