//! `iotop-bpf report REC -o FILE.html|.svg`: the offline report's command. It replays the
//! recording through the same pipeline as `--replay --json` (as fast as it reads, so a long
//! recording takes as long as its replay), folds every interval into a
//! `report::timeline::Timeline`, and writes the page (`report::html`) or one heat map. It
//! only reads a file: no privileges, no probes.

use std::{
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    pipeline::{Pipeline, Step},
    recording::Note,
    report::{
        html::{self, DiskLatency, HeatMapSpec, Meta},
        timeline::Timeline,
    },
};

/// What `iotop-bpf report` is asked to draw.
#[derive(Clone, Debug)]
pub struct Options {
    /// The recording (from --record): a file, or the parts of a rotated one.
    pub recording: Vec<PathBuf>,
    /// The page to write (FILE.html), or one heat map (FILE.svg).
    pub output: PathBuf,
    /// For .svg: the disk to draw (default: the busiest).
    pub disk: Option<String>,
    /// For .svg: a process to draw instead of a disk.
    pub pid: Option<u32>,
    /// For .svg: which latency (default: device time for a disk, sync calls for a process).
    pub latency: Option<HeatLatency>,
    /// Processes per table.
    pub top: usize,
}

/// The latency a standalone heat map shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeatLatency {
    Total,
    Queue,
    Device,
    Sync,
}

pub fn run(args: &Options) -> Result<()> {
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
            crate::names::path(&args.output)
        ),
    };
    let (meta, timeline) = read(&args.recording)?;
    let body = match kind {
        Output::Html => html::page(&meta, &timeline, args.top),
        Output::Svg => heat_map(&meta, &timeline, args)?,
    };
    write_private(&args.output, &body)?;
    eprintln!(
        "iotop-bpf: wrote {} ({} intervals, {} KiB)",
        crate::names::path(&args.output),
        timeline.intervals,
        body.len() >> 10
    );
    Ok(())
}

enum Output {
    Html,
    Svg,
}

/// The heat map `-o FILE.svg` asks for: `--disk` or `--pid`, else the busiest disk; the
/// arguments checked here, the recording's contents by the drawing.
fn heat_map(meta: &Meta, timeline: &Timeline, args: &Options) -> Result<String> {
    let spec = if let Some(pid) = args.pid {
        let sync = match args.latency {
            Some(HeatLatency::Sync) => Some(true),
            None => None,
            Some(HeatLatency::Total) => Some(false),
            Some(other) => {
                bail!("--latency {other:?} is per disk; a process has total or sync latency",)
            }
        };
        HeatMapSpec::Process { pid, sync }
    } else {
        let latency = match args.latency.unwrap_or(HeatLatency::Device) {
            HeatLatency::Total => DiskLatency::Total,
            HeatLatency::Queue => DiskLatency::Queue,
            HeatLatency::Device => DiskLatency::Device,
            HeatLatency::Sync => bail!("--latency sync is per process: add --pid PID"),
        };
        HeatMapSpec::Disk {
            name: args.disk.clone(),
            latency,
        }
    };
    html::single_heat_map(meta, timeline, &spec, &args.recording[0])
}

/// Replays the recording (a file, or the parts of a rotated one) as fast as it reads and
/// folds every interval into a timeline: to wherever it ends, what the replay met said in
/// the page's banner and on stderr.
pub fn read(paths: &[PathBuf]) -> Result<(Meta, Timeline)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async {
        let mut pipeline = Pipeline::replay(paths, None)?;
        let mut timeline = Timeline::new();
        while let Step::Interval(snap) = pipeline.next().await? {
            timeline.add(&snap);
        }
        let notes = pipeline.replay_notes();
        let lines: Vec<String> = notes.iter().map(Note::line).collect();
        if timeline.intervals == 0 {
            let why = lines
                .first()
                .map_or_else(String::new, |line| format!(" ({line})"));
            bail!(
                "{} holds no complete interval: nothing to report{why}",
                crate::names::path(&paths[0])
            );
        }
        for line in &lines {
            eprintln!("iotop-bpf: {}", crate::names::show(line));
        }
        let info = pipeline.info();
        let meta = Meta {
            host: info.host.clone(),
            kernel: info.kernel.clone(),
            started_unix_ms: info.started_unix_ms,
            ends_early: notes.iter().any(Note::ends_early),
            notes: lines,
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
        .with_context(|| format!("create {}", crate::names::path(path)))?;
    // An existing file keeps its mode through open(): make it private too.
    std::fs::set_permissions(
        path,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
    )
    .with_context(|| format!("make {} private", crate::names::path(path)))?;
    file.write_all(body.as_bytes())
        .and_then(|()| file.flush())
        .with_context(|| format!("write {}", crate::names::path(path)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::html::tests::timeline;

    #[test]
    fn one_svg_heat_map_for_slides() {
        let (info, t) = timeline();
        let dir = std::env::temp_dir();
        let args = |disk: Option<&str>, pid: Option<u32>, latency| Options {
            recording: vec![dir.join("unused")],
            output: dir.join("x.svg"),
            disk: disk.map(String::from),
            pid,
            latency,
            top: 10,
        };
        let svg = heat_map(&info, &t, &args(Some("loop0"), None, None)).unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("loop0 device time"));
        let svg = heat_map(&info, &t, &args(None, Some(5689), None)).unwrap();
        assert!(svg.contains("sync call latency"));
        let err = heat_map(&info, &t, &args(Some("sdz"), None, None)).unwrap_err();
        assert!(
            format!("{err:#}").contains("no disk sdz in this recording (it has loop0, nvme0n1)"),
            "{err:#}"
        );
        let err = heat_map(&info, &t, &args(None, None, Some(HeatLatency::Sync))).unwrap_err();
        assert!(format!("{err:#}").contains("add --pid"), "{err:#}");
    }
}
