//! The evaluation corpus: real programs (SQLite, fio job files, tar, dd, cp, cat, Python
//! loggers, O_DSYNC writers, io_uring fsyncs) on loop-backed ext4 and XFS with 1 KiB and
//! 4 KiB blocks, each judged by the findings iotop-bpf raises while it runs, against what an
//! engineer would expect.
//!
//! Each workload runs on its own fresh filesystem under its own `iotop-bpf --json`. A
//! finding belongs to the workload when its process is the workload's shell or one of its
//! descendants (polled from /proc while it runs), or, for disk findings, when its disk is the
//! workload's loop device. Only `WARN` and `CRIT` count: they mean "a pathology with a fix".
//!
//! Scoring: every expected group ("one of these kinds") raised is a true positive, every
//! group not raised a false negative, every raised kind neither expected nor tolerated a
//! false positive. Tolerated kinds are true of the workload but depend on timing on this
//! machine (how long a flush takes on a RAM-backed loop device), so they are neither
//! required nor counted against it.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
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

pub struct Workload {
    pub name: &'static str,
    /// What it is, for the table.
    pub about: &'static str,
    /// A shell command; `$D` is the filesystem's mount point, `$CORPUS` the corpus directory.
    pub command: &'static str,
    pub filesystems: &'static [Fs],
    /// Groups of kinds: one of each group must be raised.
    pub expect: &'static [&'static [&'static str]],
    /// Kinds that may be raised without counting against it (true of the workload, but
    /// timing-dependent here).
    pub tolerate: &'static [&'static str],
    /// A file name the expected findings must name ("" for none).
    pub file: &'static str,
}

/// The corpus. Most are programs people run; none is one of iotop-bpf's own reproducers.
pub const CORPUS: &[Workload] = &[
    Workload {
        name: "sqlite-autocommit",
        about: "sqlite3: 300 INSERTs, each its own transaction",
        command: "sh \"$CORPUS/sqlite-autocommit.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[&["sync_storm"]],
        tolerate: &["flush_heavy"],
        file: "app.db",
    },
    Workload {
        name: "sqlite-batched",
        about: "sqlite3: 20,000 INSERTs, 1,000 per transaction",
        command: "sh \"$CORPUS/sqlite-batched.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "fio-randwrite-libaio",
        about: "fio -rw=randwrite -bs=4k -direct=1 -numjobs=2 -ioengine=libaio",
        command: "sh \"$CORPUS/fio-randwrite-libaio.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "fio-database",
        about: "fio job file: 8 KiB random direct I/O + a WAL synced every 32 records",
        command: "sh \"$CORPUS/fio-database.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "tar-extract-sync",
        about: "tar -x of /usr/share/doc, then sync",
        command: "sh \"$CORPUS/tar-extract-sync.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "logger",
        about: "python: 64-512 B records, each fsynced, 1 MiB every 100th",
        command: "python3 \"$CORPUS/logger.py\" 3",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy"],
        file: "app.log",
    },
    Workload {
        name: "lab001",
        about: "python lab001 as shipped: 128 B + fsync, 2 MiB every 200th, 50 MiB loop",
        command: "python3 \"$CORPUS/lab001.py\" 3",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy"],
        file: "lab001.data",
    },
    Workload {
        name: "dd-unaligned-direct",
        about: "dd bs=3584 oflag=direct: appends off block boundaries",
        command: "sh \"$CORPUS/dd-unaligned-direct.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[&["sub_block_tail_write"]],
        tolerate: &[],
        file: "dd.out",
    },
    Workload {
        name: "dio-appends",
        about: "python O_DIRECT appends from offsets 3584/1024/512/2560, 8 KiB-1 MiB",
        command: "python3 \"$CORPUS/dio-appends.py\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[&["sub_block_tail_write"]],
        tolerate: &[],
        file: "dio",
    },
    Workload {
        name: "fio-prealloc-direct",
        about: "fio: aligned 4 KiB O_DIRECT overwrites of a preallocated file",
        command: "sh \"$CORPUS/fio-prealloc-direct.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "dd-buffered",
        about: "dd bs=1M count=256 conv=fdatasync",
        command: "sh \"$CORPUS/dd-buffered.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "cp-sync",
        about: "cp of a 200 MiB file, then sync",
        command: "sh \"$CORPUS/cp-sync.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "cat-read",
        about: "cat of a 200 MiB file from a cold cache",
        command: "sh \"$CORPUS/cat-read.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "fio-fsync-512",
        about: "fio --bs=512 --fsync=1: 512-byte writes, each fsynced",
        command: "sh \"$CORPUS/fio-fsync-512.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        // 512 bytes below a block: amplified; on a 1 KiB-block filesystem barely (the
        // journal is small), and then it is named a storm of syncs instead.
        expect: &[&["write_amplification", "sync_storm"]],
        tolerate: &["flush_heavy", "sync_storm"],
        file: "fs.0.0",
    },
    Workload {
        name: "maildir",
        about: "python: 400 small messages, each fsynced, and the directory",
        command: "python3 \"$CORPUS/maildir.py\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy", "sync_storm"],
        file: "mail/m",
    },
    Workload {
        name: "dd-dsync",
        about: "dd bs=128 count=300 oflag=dsync: each write syncs itself, no fsync",
        command: "sh \"$CORPUS/dd-dsync.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy", "sync_storm"],
        file: "dd.out",
    },
    Workload {
        name: "dsync-logger",
        about: "python: 64-512 B records to an O_DSYNC file",
        command: "python3 \"$CORPUS/dsync-logger.py\" 3",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy", "sync_storm"],
        file: "dsync.log",
    },
    Workload {
        name: "dd-dsync-1m",
        about: "dd bs=1M count=64 oflag=dsync: whole megabytes, each synced",
        command: "sh \"$CORPUS/dd-dsync-1m.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
    Workload {
        name: "fio-uring-fsync",
        about: "fio --ioengine=io_uring --bs=4k --fsync=1: an io_uring fsync per 4 KiB write",
        command: "sh \"$CORPUS/fio-uring-fsync.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        // The payload of io_uring writes is not measured: no amplification ratio, but each
        // fsync writing about one page itself, over and over, is a storm.
        expect: &[&["sync_storm"]],
        tolerate: &["flush_heavy"],
        file: "uring.0.0",
    },
    Workload {
        name: "fio-uring-batched",
        about: "fio --ioengine=io_uring --bs=1m --fsync=16: one io_uring fsync per 16 MiB",
        command: "sh \"$CORPUS/fio-uring-batched.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[],
        tolerate: &[],
        file: "",
    },
];

/// One workload on one filesystem.
pub struct Cell {
    pub workload: &'static str,
    pub about: &'static str,
    pub fs: Fs,
    pub expected: Vec<String>,
    /// WARN/CRIT kinds raised for it, and one summary per kind.
    pub raised: Vec<(String, String)>,
    pub true_positives: usize,
    pub false_negatives: usize,
    pub false_positives: Vec<String>,
    /// An expected finding that does not name the workload's file.
    pub unnamed: Option<String>,
    pub seconds: f64,
}

impl Cell {
    pub fn correct(&self) -> bool {
        self.false_negatives == 0 && self.false_positives.is_empty() && self.unnamed.is_none()
    }
}

pub struct Report {
    pub cells: Vec<Cell>,
}

#[expect(clippy::cast_precision_loss, reason = "ratios of small counts")]
fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        1.0
    } else {
        num as f64 / den as f64
    }
}

impl Report {
    pub fn true_positives(&self) -> usize {
        self.cells.iter().map(|c| c.true_positives).sum()
    }
    pub fn false_negatives(&self) -> usize {
        self.cells.iter().map(|c| c.false_negatives).sum()
    }
    pub fn false_positives(&self) -> usize {
        self.cells.iter().map(|c| c.false_positives.len()).sum()
    }
    pub fn precision(&self) -> f64 {
        let tp = self.true_positives();
        ratio(tp, tp + self.false_positives())
    }
    pub fn recall(&self) -> f64 {
        let tp = self.true_positives();
        ratio(tp, tp + self.false_negatives())
    }

    /// The table for the README.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| workload | fs | expected (WARN/CRIT) | raised (WARN/CRIT) | verdict |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|");
        for c in &self.cells {
            let expected = if c.expected.is_empty() {
                "nothing".to_string()
            } else {
                c.expected.join(", ")
            };
            let raised = if c.raised.is_empty() {
                "nothing".to_string()
            } else {
                c.raised
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let verdict = if c.correct() {
                "ok".to_string()
            } else if c.false_negatives > 0 {
                "MISSED".to_string()
            } else if let Some(kind) = &c.unnamed {
                format!("{kind} DOES NOT NAME THE FILE")
            } else {
                format!("FALSE POSITIVE ({})", c.false_positives.join(", "))
            };
            let _ = writeln!(
                out,
                "| `{}` ({}) | {} | {expected} | {raised} | {verdict} |",
                c.workload, c.about, c.fs
            );
        }
        let _ = writeln!(
            out,
            "\n{} runs: {} true positives, {} false negatives, {} false positives; \
             precision {:.2}, recall {:.2}.",
            self.cells.len(),
            self.true_positives(),
            self.false_negatives(),
            self.false_positives(),
            self.precision(),
            self.recall()
        );
        out
    }
}

/// The corpus directory (the scripts and job files the workloads run).
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Runs the corpus (the workloads whose name contains `filter`, if given).
pub fn run(filter: Option<&str>) -> Report {
    let mut cells = Vec::new();
    for w in CORPUS
        .iter()
        .filter(|w| filter.is_none_or(|f| w.name.contains(f)))
    {
        for &fs in w.filesystems {
            let cell = run_one(w, fs);
            eprintln!(
                "eval: {} on {}: raised {:?} in {:.1}s{}",
                w.name,
                fs,
                cell.raised.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                cell.seconds,
                if cell.correct() { "" } else { "  <-- WRONG" }
            );
            cells.push(cell);
        }
    }
    Report { cells }
}

fn run_one(w: &Workload, fs_kind: Fs) -> Cell {
    let started = Instant::now();
    let fs = LoopFs::with_block(fs_kind.kind, 1024, fs_kind.block);
    let run = JsonRun::start(&[]);
    let child = Command::new("sh")
        .arg("-c")
        .arg(w.command)
        .env("D", &fs.mountpoint)
        .env("CORPUS", corpus_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start workload {}: {e}", w.name));
    let pids = Arc::new(Mutex::new(BTreeSet::from([child.id()])));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (pids, done) = (Arc::clone(&pids), Arc::clone(&done));
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                collect_descendants(&pids);
                thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for workload {}: {e}", w.name));
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    assert!(
        output.status.success(),
        "workload {} on {fs_kind} failed: {}\n{}",
        w.name,
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // Let the last sync calls settle and an INFO finding persist past its streak.
    thread::sleep(Duration::from_millis(1_500));
    let intervals = run.stop();
    let pids = pids.lock().map(|p| p.clone()).unwrap_or_default();
    let raised = raised_for(&intervals, &pids, &fs.dev);
    drop(fs);
    score(w, fs_kind, raised, started.elapsed().as_secs_f64())
}

/// Adds every process whose parent is already in `pids`.
fn collect_descendants(pids: &Mutex<BTreeSet<u32>>) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let Ok(mut pids) = pids.lock() else { return };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pids.contains(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid.is_some_and(|ppid| pids.contains(&ppid)) {
            pids.insert(pid);
        }
    }
}

/// WARN/CRIT kinds raised for the workload: its processes' findings, and its disk's.
fn raised_for(intervals: &[Value], pids: &BTreeSet<u32>, dev: &str) -> Vec<(String, String)> {
    let mut raised: Vec<(String, String)> = Vec::new();
    for f in intervals
        .iter()
        .flat_map(|i| i["findings"].as_array().into_iter().flatten())
    {
        let severity = f["severity"].as_str().unwrap_or("");
        if severity != "warning" && severity != "critical" {
            continue;
        }
        let mine = match f["pid"].as_u64() {
            Some(pid) => u32::try_from(pid).is_ok_and(|pid| pids.contains(&pid)),
            None => f["dev"].as_str() == Some(dev),
        };
        let kind = f["kind"].as_str().unwrap_or("?").to_string();
        if mine && !raised.iter().any(|(k, _)| *k == kind) {
            raised.push((kind, f["summary"].as_str().unwrap_or("").to_string()));
        }
    }
    raised
}

fn score(w: &Workload, fs: Fs, raised: Vec<(String, String)>, seconds: f64) -> Cell {
    let is_raised = |kind: &str| raised.iter().any(|(k, _)| k == kind);
    let true_positives = w
        .expect
        .iter()
        .filter(|group| group.iter().any(|k| is_raised(k)))
        .count();
    let false_positives = raised
        .iter()
        .map(|(k, _)| k)
        .filter(|k| {
            !w.expect.iter().any(|group| group.contains(&k.as_str()))
                && !w.tolerate.contains(&k.as_str())
        })
        .cloned()
        .collect();
    let unnamed = raised
        .iter()
        .filter(|(k, _)| w.expect.iter().any(|group| group.contains(&k.as_str())))
        .find(|(_, summary)| !summary.contains(w.file))
        .map(|(k, _)| k.clone());
    Cell {
        workload: w.name,
        about: w.about,
        fs,
        expected: w.expect.iter().map(|group| group.join(" or ")).collect(),
        true_positives,
        false_negatives: w.expect.len() - true_positives,
        false_positives,
        unnamed,
        raised,
        seconds,
    }
}
