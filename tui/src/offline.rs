//! `iotop-bpf report REC -o FILE.html|.svg`: the offline report's command. It replays the
//! recording through the same pipeline as `--replay --json` (as fast as it reads, so a long
//! recording takes as long as its replay), folds every interval into a
//! [`report::timeline::Timeline`], and writes the page ([`report::html`]) or one heat map. It
//! only reads a file: no privileges, no probes.

use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _, path::Path};

use anyhow::{Context as _, Result, bail};

use crate::{
    cli::Report,
    pipeline::{Pipeline, Step},
    report::{
        html::{self, Meta},
        timeline::Timeline,
    },
};

pub fn run(args: &Report) -> Result<()> {
    let kind = match args
        .output
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("html" | "htm") => Output::Html,
        Some("svg") => Output::Svg,
        _ => bail!(
            "{}: the output must end in .html (the report) or .svg (one heat map)",
            args.output.display()
        ),
    };
    let (meta, timeline) = read(&args.recording)?;
    let body = match kind {
        Output::Html => html::page(&meta, &timeline, args.top),
        Output::Svg => html::single_heat_map(&meta, &timeline, args)?,
    };
    write_private(&args.output, &body)?;
    eprintln!(
        "iotop-bpf: wrote {} ({} intervals, {} KiB)",
        args.output.display(),
        timeline.intervals,
        body.len() >> 10
    );
    Ok(())
}

enum Output {
    Html,
    Svg,
}

/// Replays the recording as fast as it reads and folds every interval into a timeline.
pub fn read(path: &Path) -> Result<(Meta, Timeline)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async {
        let mut pipeline = Pipeline::replay(path, None)?;
        let mut timeline = Timeline::new();
        while let Step::Interval(snap) = pipeline.next().await? {
            timeline.add(&snap);
        }
        if timeline.intervals == 0 {
            bail!(
                "{} holds no complete interval: nothing to report",
                path.display()
            );
        }
        let info = pipeline.info();
        let meta = Meta {
            host: info.host.clone(),
            kernel: info.kernel.clone(),
            started_unix_ms: info.started_unix_ms,
        };
        Ok((meta, timeline))
    })
}

/// The report names other processes and their files: readable by its owner only.
fn write_private(path: &Path, body: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    // An existing file keeps its mode through open(): make it private too.
    std::fs::set_permissions(
        path,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
    )
    .with_context(|| format!("make {} private", path.display()))?;
    file.write_all(body.as_bytes())
        .and_then(|()| file.flush())
        .with_context(|| format!("write {}", path.display()))
}
