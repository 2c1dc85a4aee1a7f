//! Command-line interface.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::export::{
    server::{DEFAULT_LISTEN, parse_listen},
    workloads::{DEFAULT_TOP, MAX_TOP},
};

#[derive(Debug, Parser)]
#[command(
    name = "iotop-bpf",
    version,
    // Every command's man page then carries the version.
    propagate_version = true,
    about = "Live, top-like view of Linux storage I/O: who does it, how slow it is, and why",
    after_help = "Keys in the live view: q quit, space pause, Tab next pane, j/k or arrows select, \
                  s or < > sort, r reverse, / filter, c cumulative, C per cgroup, x kernel workers \
                  one by one, Enter open, H heat map, [ ] step back, w save the screen, ? help.\n\
                  Needs root, or CAP_BPF and CAP_PERFMON (plus CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE and \
                  CAP_SYSLOG for every feature; see docs/kernels.md): sudo iotop-bpf"
)]
pub struct Cli {
    /// Print a text report every interval instead of the live view (like `iotop -b`).
    #[arg(short, long)]
    pub batch: bool,

    /// Print one JSON object per interval (implies --batch).
    #[arg(long)]
    pub json: bool,

    /// Seconds per interval.
    #[arg(short, long, value_name = "SECS", default_value = "1", value_parser = parse_delay, env = "IOTOP_BPF_DELAY")]
    pub delay: Duration,

    /// Stop after N intervals.
    #[arg(short = 'n', long, value_name = "N")]
    pub iterations: Option<u64>,

    #[command(flatten)]
    pub record: Record,

    /// Play a recording back through the same views and reports; needs no root. The parts
    /// of a rotated recording are given together (FILE.*), or by its base name (FILE).
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "record")]
    pub replay: Vec<PathBuf>,

    /// Replay speed in the live view (2 = twice as fast).
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed, requires = "replay")]
    pub speed: f64,

    /// Only report these processes (repeat or comma-separate).
    #[arg(short, long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pids: Vec<u32>,

    /// --batch and --json list at most N processes per interval, those with a finding first,
    /// then the busiest; the rest are summed in one row (JSON `processes_others`), so totals
    /// stay exact and a line stays small on a host with thousands of short-lived processes.
    #[arg(long = "procs", value_name = "N", default_value_t = crate::report::DEFAULT_MAX_PROCS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub max_procs: usize,

    /// Also serve Prometheus metrics on ADDR while running (see `iotop-bpf serve`).
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,

    /// With --listen: command names with series of their own; the rest are summed as
    /// comm="other".
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP, value_parser = parse_top, requires = "listen")]
    pub top: usize,

    #[command(flatten)]
    pub viewers: Viewers,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a built-in I/O workload (reproducers for demos, workshops and tests).
    #[command(subcommand)]
    Workload(Workload),
    /// Check the environment and the probes, print what works and what is degraded, and exit.
    Check(Check),
    /// Run headless and serve Prometheus metrics at http://ADDR/metrics until stopped.
    Serve(Serve),
    /// Build a self-contained HTML report (or one SVG heat map) from a recording; no root.
    Report(Report),
    /// Open the live view of a running iotop-bpf (live view or serve) from another terminal,
    /// with its own sort, selection and pause; needs no root, only access to its socket.
    Attach(Attach),
    /// Show the catalogue of pathologies one at a time on a scratch loop-backed filesystem,
    /// with a caption for each (for a projector). Needs root.
    Demo(Demo),
}

/// `--record` and `--record-max`, for the live view, the batch reports and `serve`.
#[derive(Clone, Debug, Default, Args)]
pub struct Record {
    /// Write the event stream to FILE while running (replay it with --replay, report on it
    /// with `iotop-bpf report`). A write that fails (a full disk) stops the recording, never
    /// the tool; what was written replays.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// With --record: keep the recording within SIZE on disk (bytes, or 512M, 2G: K, M, G, T
    /// are powers of 1024), rotated into parts FILE.0001, FILE.0002, ... of SIZE/8 each, the
    /// oldest removed: for long unattended captures.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "record")]
    pub record_max: Option<u64>,
}

/// Where the live view and `serve` publish their intervals for `iotop-bpf attach`.
#[derive(Clone, Debug, Default, Args)]
pub struct Viewers {
    /// Publish each interval for `iotop-bpf attach` on this Unix socket (default:
    /// /run/iotop-bpf/PID.sock as root, else $XDG_RUNTIME_DIR/iotop-bpf/PID.sock).
    #[arg(long, value_name = "PATH")]
    pub viewers_socket: Option<PathBuf>,
    /// Let members of GROUP attach: the socket (mode 0660) is given to this group (a name or
    /// a gid). Without it, only the tool's user and group may.
    #[arg(long, value_name = "GROUP")]
    pub viewers_group: Option<String>,
    /// Also publish over TCP on ADDR (IP:PORT, :PORT for every interface); a viewer must
    /// give the token. Unencrypted: prefer an SSH tunnel to the socket.
    #[arg(long, value_name = "ADDR", value_parser = parse_viewers_listen)]
    pub viewers_listen: Option<SocketAddr>,
    /// The token TCP viewers give (default: a random one, printed at start). Set it in the
    /// environment rather than here, where other users can read it.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "IOTOP_BPF_VIEWERS_TOKEN",
        hide_env_values = true
    )]
    pub viewers_token: Option<String>,
    /// Publish nothing for viewers.
    #[arg(long, conflicts_with_all = ["viewers_socket", "viewers_group", "viewers_listen"])]
    pub no_viewers: bool,
}

impl Viewers {
    /// What the viewers' endpoint binds.
    pub fn endpoint(&self) -> crate::viewers::endpoint::Options {
        crate::viewers::endpoint::Options {
            socket: self.viewers_socket.clone(),
            group: self.viewers_group.clone(),
            listen: self.viewers_listen,
            token: self.viewers_token.clone(),
            off: self.no_viewers,
        }
    }

    /// Any of the options was given (on the command line; the token may come from the
    /// environment, which `attach` shares).
    pub fn given(&self) -> bool {
        self.viewers_socket.is_some()
            || self.viewers_group.is_some()
            || self.viewers_listen.is_some()
            || self.no_viewers
    }
}

#[derive(Debug, Args)]
pub struct Attach {
    /// The tool's socket (a path) or TCP address (HOST:PORT). Default: the one running
    /// tool's socket in /run/iotop-bpf or $XDG_RUNTIME_DIR/iotop-bpf.
    #[arg(value_name = "SOCKET|ADDR")]
    pub target: Option<String>,
    /// The token of a TCP address (the tool printed it at start). Set it in the environment
    /// rather than here, where other users can read it.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "IOTOP_BPF_VIEWERS_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

#[derive(Debug, Args)]
pub struct Check {
    /// Also print the verifier's whole log for each program the kernel refused.
    #[arg(long)]
    pub verbose: bool,
    /// Print what the kernel answered the probe plan (BTF, tracefs, privileges) as JSON and
    /// exit without loading anything: the kernel matrix's fixtures.
    #[arg(long)]
    pub facts: bool,
}

#[derive(Debug, Args)]
pub struct Report {
    /// The recording (from --record): one file, or the parts of a rotated one (FILE.*, or
    /// its base name FILE).
    #[arg(required = true, num_args = 1..)]
    pub recording: Vec<PathBuf>,
    /// The page to write (FILE.html), or one heat map (FILE.svg).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// For .svg: the disk to draw (default: the busiest).
    #[arg(long, value_name = "NAME", conflicts_with = "pid")]
    pub disk: Option<String>,
    /// For .svg: a process to draw instead of a disk.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// For .svg: which latency (default: device time for a disk, sync calls for a process).
    #[arg(long, value_enum)]
    pub latency: Option<HeatLatency>,
    /// Processes per table.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

/// The latency a standalone heat map shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HeatLatency {
    Total,
    Queue,
    Device,
    Sync,
}

#[derive(Debug, Args)]
pub struct Demo {
    /// Seconds each step runs.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub step_seconds: u64,
    /// Text reports with the captions between them, instead of the live view.
    #[arg(short, long)]
    pub batch: bool,
    /// Only these steps (comma-separated names: see the captions), in catalogue order.
    #[arg(long, value_delimiter = ',', value_name = "STEP")]
    pub only: Vec<String>,
    /// Seconds per interval.
    #[arg(short, long, value_name = "SECS", default_value = "1", value_parser = parse_delay)]
    pub delay: Duration,
}

#[derive(Debug, Args)]
pub struct Serve {
    /// Where to listen: IP:PORT, [IPv6]:PORT, localhost:PORT, :PORT (every interface) or
    /// PORT (loopback).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Command names with series of their own; the rest are summed as comm="other".
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP, value_parser = parse_top)]
    pub top: usize,
    /// Seconds per interval: how often the metrics are brought up to date.
    #[arg(short, long, value_name = "SECS", default_value = "1", value_parser = parse_delay)]
    pub delay: Duration,
    #[command(flatten)]
    pub record: Record,
    #[command(flatten)]
    pub viewers: Viewers,
}

#[derive(Debug, Subcommand)]
pub enum Workload {
    /// O_DIRECT block-aligned writes then reads of one file: healthy, easy-to-count I/O.
    DirectIo(DirectIo),
    /// Small appends, each followed by a sync call (lab001): write amplification.
    SmallSync(SmallSync),
    /// A process stuck in D state (uninterruptible sleep) for a known time, via vfork.
    Dstate(DState),
    /// O_DIRECT appends from an unaligned offset: the kernel zeroes each block's tail.
    DioTail(DioTail),
    /// I/O that should raise no finding (aligned direct, big sequential, database-like).
    Healthy(Healthy),
    /// bpf-perf-workshop's lab001 as it ships: 128-byte writes each fsynced, a 2 MiB write
    /// every 200th, over a 50 MiB file rewritten from the start; runs until stopped.
    Lab001(Lab001),
    /// The classic `fio -rw=randwrite -bs=4k -size=100m -direct=1 -numjobs=2 -ioengine=libaio`,
    /// without fio: Linux AIO (io_submit) O_DIRECT random writes from two processes.
    AioRandwrite(AioRandwrite),
}

#[derive(Debug, Args)]
pub struct Lab001 {
    /// Directory for lab001.data (on the filesystem to look at).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Stop after this many seconds (default: run until stopped, as the original).
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Stop after this many writes.
    #[arg(long)]
    pub count: Option<u64>,
    /// Keep lab001.data afterwards.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct AioRandwrite {
    /// Directory for the job files (one per job, as fio lays them out).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Bytes per job file (fio's -size).
    #[arg(long, default_value_t = 100 << 20)]
    pub size: u64,
    /// Bytes per write (fio's -bs; a multiple of 512).
    #[arg(long, default_value_t = 4096)]
    pub bs: u64,
    /// Processes, each with its own file (fio's -numjobs).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// Writes in flight per job (fio's -iodepth).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub iodepth: u32,
    /// Keep writing (time-based) for this many seconds; default: each block once, like fio.
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Keep the job files afterwards.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct DioTail {
    /// Directory for the data file (XFS or ext4 to see the zeroing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Offset of the first write (a multiple of 512).
    #[arg(long, default_value_t = 3584)]
    pub offset: u64,
    /// Bytes per write (a multiple of 512).
    #[arg(long, default_value_t = 2 << 20)]
    pub size: usize,
    /// Writes, each starting where the previous one ended.
    #[arg(long, default_value_t = 20)]
    pub count: u64,
    /// Write the whole file first, so no write extends EOF.
    #[arg(long)]
    pub prealloc: bool,
    /// Keep the data file afterwards.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct Healthy {
    /// Directory for the files.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Multiplies the amount of I/O.
    #[arg(long, default_value_t = 1)]
    pub scale: u64,
}

#[derive(Debug, Args)]
pub struct DState {
    /// Seconds to stay blocked.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
}

/// The sync call `small-sync` makes after each record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SyncCallKind {
    Fsync,
    Fdatasync,
    SyncFileRange,
    /// No sync at all: buffered writes left to background write-back.
    None,
}

impl SyncCallKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Fsync => "fsync",
            Self::Fdatasync => "fdatasync",
            Self::SyncFileRange => "sync_file_range",
            Self::None => "no sync",
        }
    }
}

#[derive(Debug, Args)]
pub struct SmallSync {
    /// Directory for the log file (on the filesystem to look at).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Bytes per record.
    #[arg(long, default_value_t = 128)]
    pub record_size: usize,
    /// The sync call after each record.
    #[arg(long, value_enum, default_value_t = SyncCallKind::Fsync)]
    pub sync: SyncCallKind,
    /// Records to write.
    #[arg(long, default_value_t = 500)]
    pub count: u64,
    /// Pause between records, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub interval_ms: u64,
    /// Keep the log file afterwards.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct DirectIo {
    /// The file to write and read (created if missing). Must be on a block-backed filesystem.
    #[arg(long)]
    pub file: PathBuf,
    /// Number of writes.
    #[arg(long, default_value_t = 100)]
    pub writes: u64,
    /// Number of reads (of the blocks just written, round robin).
    #[arg(long, default_value_t = 100)]
    pub reads: u64,
    /// Bytes per request (a multiple of the logical block size).
    #[arg(long, default_value_t = 4096)]
    pub block_size: usize,
}

impl Cli {
    pub fn is_batch(&self) -> bool {
        self.batch || self.json
    }
}

fn parse_speed(text: &str) -> Result<f64, String> {
    let speed: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !(0.01..=1000.0).contains(&speed) {
        return Err(format!("{speed} is out of range (0.01 to 1000)"));
    }
    Ok(speed)
}

/// `--viewers-listen`: the forms `--listen` takes (its words about port 0 are the exporter's).
fn parse_viewers_listen(text: &str) -> Result<SocketAddr, String> {
    parse_listen(text).map_err(|e| {
        e.replace(
            "Prometheus needs to know where to scrape",
            "viewers need to know where to attach",
        )
    })
}

fn parse_top(text: &str) -> Result<usize, String> {
    let top: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !(1..=MAX_TOP).contains(&top) {
        return Err(format!(
            "{top} is out of range (1 to {MAX_TOP}: each name costs about 33 series)"
        ));
    }
    Ok(top)
}

/// The smallest `--record-max`: each of its parts holds a few intervals of a busy host.
const MIN_RECORD_MAX: u64 = 1 << 20;

/// `--record-max`: bytes, or a whole number with K, M, G or T (powers of 1024; `KiB`, `MB`
/// and the like read the same).
fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a size (say 512M or 2G)");
    let lower = text.trim().to_ascii_lowercase();
    let digits = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits);
    let shift = match unit.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(bad()),
    };
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(bad)?;
    if bytes < MIN_RECORD_MAX {
        return Err(format!(
            "{text} is too small: at least 1M (each of its 8 parts holds a few intervals)"
        ));
    }
    Ok(bytes)
}

fn parse_delay(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(0.1..=3600.0).contains(&secs) {
        return Err(format!("{secs} s is out of range (0.1 to 3600)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests;
