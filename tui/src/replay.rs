//! `--replay FILE`: a recording fed through the same model, views and reports as the live
//! probes. No root, no probes: workshops and post-mortems.

use std::{io::Write, path::Path};

use anyhow::Result;

use crate::{
    cli::Cli,
    feed::recording::{Header, Replayer},
    headless::{ingest, print},
    model::{Aggregator, Settings, Snapshot},
};

pub struct Replay {
    replayer: Replayer,
    model: Aggregator,
}

impl Replay {
    pub fn open(path: &Path) -> Result<Self> {
        let replayer = Replayer::open(path)?;
        let model = Aggregator::new(Settings::default(), replayer.header.started_ns);
        Ok(Self { replayer, model })
    }

    pub fn header(&self) -> &Header {
        &self.replayer.header
    }

    /// Replays up to the end of the next recorded interval; `None` at the end.
    pub fn next_interval(&mut self) -> Result<Option<Snapshot>> {
        while let Some(entry) = self.replayer.next_entry()? {
            match entry.into_record() {
                Ok(record) => ingest(&mut self.model, &record),
                Err(sample) => return Ok(Some(self.model.tick(&sample))),
            }
        }
        Ok(None)
    }

    fn unix_ms(&self, snap: &Snapshot) -> u64 {
        self.header().started_unix_ms + snap.elapsed_ns / 1_000_000
    }
}

/// `--replay FILE --batch|--json`: every recorded interval, as fast as it can be read.
pub fn run_headless(cli: &Cli, path: &Path, out: &mut impl Write) -> Result<()> {
    let mut replay = Replay::open(path)?;
    let mut printed = 0u64;
    while let Some(snap) = replay.next_interval()? {
        if !print(cli, &snap, replay.unix_ms(&snap), out)? {
            break;
        }
        printed += 1;
        if cli.iterations.is_some_and(|n| printed >= n) {
            break;
        }
    }
    Ok(())
}
