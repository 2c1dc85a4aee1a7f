//! The evaluation corpus: real programs (PostgreSQL under pgbench, SQLite, redis-server, git,
//! dpkg, rsync, sysbench, fio job files, tar, dd, cp, cat, Python loggers, O_DSYNC writers,
//! io_uring fsyncs) on loop-backed ext4, XFS (1 KiB and 4 KiB blocks) and btrfs, each judged
//! by the findings iotop-bpf raises while it runs, against what an engineer would expect, and
//! by its figures against independent oracles.
//!
//! Each workload runs on its own fresh filesystem under its own `iotop-bpf --json`. A
//! finding belongs to the workload when its process is the workload's shell or one of its
//! descendants (polled from /proc while it runs), or, for disk findings, when its disk is the
//! workload's loop device. Only `WARN` and `CRIT` count: they mean "a pathology with a fix".
//!
//! Scoring: every expected group ("one of these kinds") raised is a true positive, every
//! group not raised a false negative, every raised kind neither expected nor tolerated a
//! false positive. Tolerated kinds are true of the workload but depend on timing on this
//! machine (how long a flush takes on a RAM-backed loop device), or are a fair second name
//! for it, so they are neither required nor counted against it.
//!
//! Magnitudes: every run compares the tool's disk figures for its loop device (write bytes
//! and write requests, summed over the intervals) with /proc/diskstats read around the run.
//! Workloads that declare [`Check`]s also run under `strace -f` (seccomp-filtered to the
//! write, sync and open calls) and compare the process tree's sync calls, per kind, and its
//! logical write bytes with strace's; the `write_amplification` finding's figure with device
//! bytes / bytes the program wrote to files on the filesystem; direct I/O zeroing with what
//! the filesystem's geometry predicts from the calls strace saw (`filefrag -v` shows the
//! extents' state). A figure more than 2x off its oracle makes the run wrong, as a missed
//! finding does.
//!
//! Expectations are an engineer's reading of the program (ext4, XFS and btrfs, and the
//! program's own fsync behaviour), written before the program was run under the tool; where
//! one turned out wrong after a run, a comment on the workload says so and why.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{JsonRun, LoopFs};

/// A filesystem to run a workload on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fs {
    pub kind: &'static str,
    pub block: u32,
}

impl std::fmt::Display for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}k", self.kind, self.block / 1024)
    }
}

pub const EXT4_4K: Fs = Fs {
    kind: "ext4",
    block: 4096,
};
pub const EXT4_1K: Fs = Fs {
    kind: "ext4",
    block: 1024,
};
pub const XFS_4K: Fs = Fs {
    kind: "xfs",
    block: 4096,
};
pub const XFS_1K: Fs = Fs {
    kind: "xfs",
    block: 1024,
};
/// btrfs with 4 KiB sectors (its data block; metadata nodes are mkfs' 16 KiB).
pub const BTRFS_4K: Fs = Fs {
    kind: "btrfs",
    block: 4096,
};

/// A magnitude a workload's run is checked on, beyond the device's write bytes and requests
/// (always checked against /proc/diskstats). Every check but the device's runs the workload
/// under `strace -f`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The process tree's sync calls (JSON `syncs`, `sync_kinds`), in total and per kind,
    /// against strace: `fsync`, `fdatasync`, `sync_file_range`, `syncfs`, `sync`,
    /// `msync(MS_SYNC)`, and writes to files opened `O_DSYNC` (`O_DSYNC write`) or `O_SYNC`.
    Syncs,
    /// The bytes the process tree asked to write in `write`, `pwrite64`, `writev`, `pwritev`,
    /// `pwritev2` to files (JSON `totals.logical_write_bytes`) against strace's sum of those
    /// calls' results on fds it names a file (not pipes, sockets or devices).
    LogicalWrites,
    /// The `write_amplification` finding's `amplification` (median over its intervals)
    /// against device bytes written during the run (/proc/diskstats) / bytes the program
    /// wrote to files on the filesystem (strace). Only meaningful where the program's syncs
    /// are alike: the finding's figure is its typical sync call's.
    Amplification,
    /// O_DIRECT zeroing (JSON `direct_io.zeroing_writes`, `zeroed_tail_bytes` +
    /// `zeroed_head_bytes` + `zeroed_inside_bytes`) against what the filesystem's block size predicts from the direct
    /// writes strace saw (a partial block that was never written, or lies in an unwritten
    /// extent, is zeroed around the write: a tail pad after its end, a head pad before its
    /// start); `filefrag -v` of the files after the run shows which extents are still
    /// unwritten.
    Zeroing,
    /// The device bytes per small sync call (less than a block made durable: JSON
    /// `sync_cost.small` own + charged bytes over calls, summed over the run) against one
    /// filesystem block plus an even share, over the committing syncs strace saw (fsync,
    /// fdatasync), of what the device wrote beyond the files' data (diskstats, less each file
    /// written on the filesystem rounded up to whole blocks, from strace): what a small file
    /// synced on its own costs, its block and its share of the journal (an installer).
    SmallSyncCost,
    /// The `read_amplification` finding's figure against the device's read bytes over the
    /// run (/proc/diskstats) per byte the program asked for: `asked_bytes`, what it reads by
    /// its own count (3,000 lookups of a page). No strace: faults are no system calls.
    ReadAmplification { asked_bytes: u64 },
}

/// Most workloads: syncs and logical writes against strace.
pub const TRACED: &[Check] = &[Check::Syncs, Check::LogicalWrites];
/// Uniform small synced records: the amplification finding's figure is comparable.
pub const TRACED_AMP: &[Check] = &[Check::Syncs, Check::LogicalWrites, Check::Amplification];
/// Direct I/O whose zeroing is predictable from the calls.
pub const TRACED_DIO: &[Check] = &[Check::Syncs, Check::LogicalWrites, Check::Zeroing];

pub struct Workload {
    pub name: &'static str,
    /// What it is, for the table.
    pub about: &'static str,
    /// A shell command; `$D` is the filesystem's mount point, `$CORPUS` the corpus directory,
    /// `$CACHE` a directory kept between runs (downloads, generated inputs).
    pub command: &'static str,
    /// A shell command run on the fresh filesystem before iotop-bpf starts, then
    /// `sync -f $D`: not measured ("" for none).
    pub setup: &'static str,
    pub filesystems: &'static [Fs],
    /// Groups of kinds: one of each group must be raised.
    pub expect: &'static [&'static [&'static str]],
    /// Filesystems on which nothing is expected: the pattern vanishes with that geometry
    /// (6 KiB direct writes are whole blocks on a 1 KiB-block filesystem).
    pub quiet_on: &'static [Fs],
    /// Kinds that may be raised without counting against it (true of the workload, but
    /// timing-dependent here, or a fair second name for it).
    pub tolerate: &'static [&'static str],
    /// Kinds tolerated on one filesystem only (btrfs' log tree costs what ext4's fdatasync of
    /// an overwrite does not).
    pub tolerate_on: &'static [(Fs, &'static str)],
    /// A file name the expected findings must name ("" for none); `a|b`: either.
    pub file: &'static str,
    /// Magnitudes checked against oracles beyond the device's (see [`Check`]).
    pub checks: &'static [Check],
    /// Cells known to be wrong today, with why: shown as such in the table, not failing the
    /// run (a run where one comes out right says so). Each is an open item of the issue
    /// that added the workload.
    pub known_miss_on: &'static [(Fs, &'static str)],
}

/// The corpus directory (the scripts and job files the workloads run).
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Kept between runs: downloaded packages, the generated git pack.
pub fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/eval/cache")
}

/// Runs the corpus (the workloads whose name contains `filter`, or one of its
/// comma-separated parts, if given).
pub fn run(filter: Option<&str>) -> Report {
    let started = Instant::now();
    let mut cells = Vec::new();
    for w in CORPUS
        .iter()
        .chain(NEIGHBOURS)
        .chain(OUTSIDE)
        .filter(|w| filter.is_none_or(|f| f.split(',').any(|part| w.name.contains(part))))
    {
        for &fs in w.filesystems {
            let cell = run_one(w, fs);
            let off = cell
                .magnitudes_off()
                .iter()
                .map(|m| m.describe())
                .collect::<Vec<_>>();
            eprintln!(
                "eval: {} on {}: raised {:?} in {:.1}s ({:.1}s of workload{}){}{}{}",
                w.name,
                fs,
                cell.raised.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                cell.seconds,
                cell.workload_seconds,
                cell.first_named_s
                    .map(|s| format!(", shown at {s:.1}s"))
                    .unwrap_or_default(),
                if cell.correct() { "" } else { "  <-- WRONG" },
                if off.is_empty() {
                    String::new()
                } else {
                    format!("\n      {}", off.join("\n      "))
                },
                if cell.evidence.is_empty() {
                    String::new()
                } else {
                    format!("\n      {}", cell.evidence.join("\n      "))
                }
            );
            cells.push(cell);
        }
    }
    Report {
        cells,
        seconds: started.elapsed().as_secs_f64(),
    }
}

mod corpus;
mod neighbour;
mod outside;
mod report;
mod runner;
mod scoring;
mod trace;

pub use corpus::CORPUS;
pub use neighbour::NEIGHBOURS;
pub use outside::OUTSIDE;
pub use report::{Cell, MAX_FACTOR, Magnitude, Report, Unit};
use report::{bytes, float};
use runner::run_one;
use trace::{SRF_WRITE, Trace, filefrag_summary};
