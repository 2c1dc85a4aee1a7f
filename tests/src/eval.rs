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
    /// A file name the expected findings must name ("" for none).
    pub file: &'static str,
    /// Magnitudes checked against oracles beyond the device's (see [`Check`]).
    pub checks: &'static [Check],
    /// Cells known to be wrong today, with why: shown as such in the table, not failing the
    /// run (a run where one comes out right says so). Each is an open item of the issue
    /// that added the workload.
    pub known_miss_on: &'static [(Fs, &'static str)],
}

/// The defaults the corpus' entries start from.
const W: Workload = Workload {
    name: "",
    about: "",
    command: "",
    setup: "",
    filesystems: &[],
    expect: &[],
    quiet_on: &[],
    tolerate: &[],
    tolerate_on: &[],
    file: "",
    checks: TRACED,
    known_miss_on: &[],
};

/// The corpus. Most are programs people run; none is one of iotop-bpf's own reproducers.
pub const CORPUS: &[Workload] = &[
    Workload {
        name: "sqlite-autocommit",
        about: "sqlite3: 300 INSERTs, each its own transaction",
        command: "sh \"$CORPUS/sqlite-autocommit.sh\"",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        expect: &[&["sync_storm"]],
        tolerate: &["flush_heavy"],
        file: "app.db",
        ..W
    },
    Workload {
        name: "sqlite-batched",
        about: "sqlite3: 20,000 INSERTs, 1,000 per transaction",
        command: "sh \"$CORPUS/sqlite-batched.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        ..W
    },
    Workload {
        name: "fio-randwrite-libaio",
        about: "fio -rw=randwrite -bs=4k -direct=1 -numjobs=2 -ioengine=libaio",
        command: "sh \"$CORPUS/fio-randwrite-libaio.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        // io_submit is no write system call: nothing for strace to count.
        checks: &[],
        ..W
    },
    Workload {
        name: "fio-database",
        about: "fio job file: 8 KiB random direct I/O + a WAL synced every 32 records",
        command: "sh \"$CORPUS/fio-database.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        ..W
    },
    Workload {
        name: "tar-extract-sync",
        about: "tar -x of /usr/share/doc, then sync",
        command: "sh \"$CORPUS/tar-extract-sync.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        ..W
    },
    Workload {
        name: "logger",
        about: "python: 64-512 B records, each fsynced, 1 MiB every 100th",
        command: "python3 \"$CORPUS/logger.py\" 3",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy"],
        file: "app.log",
        ..W
    },
    Workload {
        name: "lab001",
        about: "python lab001 as shipped: 128 B + fsync, 2 MiB every 200th, 50 MiB loop",
        command: "python3 \"$CORPUS/lab001.py\" 3",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy"],
        file: "lab001.data",
        ..W
    },
    Workload {
        name: "dd-unaligned-direct",
        about: "dd bs=3584 oflag=direct: appends off block boundaries",
        command: "sh \"$CORPUS/dd-unaligned-direct.sh\"",
        filesystems: &[XFS_4K, EXT4_1K, BTRFS_4K],
        expect: &[&["sub_block_tail_write"]],
        // btrfs falls back to buffered writes for direct I/O not aligned to its sector:
        // nothing is zeroed there.
        quiet_on: &[BTRFS_4K],
        file: "dd.out",
        checks: TRACED_DIO,
        ..W
    },
    Workload {
        name: "dio-appends",
        about: "python O_DIRECT appends from offsets 3584/1024/512/2560, 8 KiB-1 MiB",
        command: "python3 \"$CORPUS/dio-appends.py\"",
        filesystems: &[EXT4_4K, XFS_1K],
        expect: &[&["sub_block_tail_write"]],
        file: "dio",
        checks: TRACED_DIO,
        ..W
    },
    Workload {
        name: "fio-prealloc-direct",
        about: "fio: aligned 4 KiB O_DIRECT overwrites of a preallocated file",
        command: "sh \"$CORPUS/fio-prealloc-direct.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        checks: TRACED_DIO,
        ..W
    },
    Workload {
        name: "dd-buffered",
        about: "dd bs=1M count=256 conv=fdatasync",
        command: "sh \"$CORPUS/dd-buffered.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        ..W
    },
    Workload {
        name: "cp-sync",
        about: "cp of a 200 MiB file, then sync",
        command: "sh \"$CORPUS/cp-sync.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        ..W
    },
    Workload {
        name: "cat-read",
        about: "cat of a 200 MiB file from a cold cache",
        command: "sh \"$CORPUS/cat-read.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        ..W
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
        checks: TRACED_AMP,
        ..W
    },
    Workload {
        name: "maildir",
        about: "python: 400 small messages, each fsynced, and the directory",
        command: "python3 \"$CORPUS/maildir.py\"",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy", "sync_storm"],
        file: "mail/m",
        checks: TRACED_AMP,
        known_miss_on: &[(
            BTRFS_4K,
            "the finding's 402x is the messages' own fsyncs; the oracle's 830x also holds the \
             directory fsyncs' cost (btrfs' log tree), which the tool keeps apart",
        )],
        ..W
    },
    Workload {
        name: "dd-dsync",
        about: "dd bs=128 count=300 oflag=dsync: each write syncs itself, no fsync",
        command: "sh \"$CORPUS/dd-dsync.sh\"",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy", "sync_storm"],
        file: "dd.out",
        checks: TRACED_AMP,
        ..W
    },
    Workload {
        name: "dsync-logger",
        about: "python: 64-512 B records to an O_DSYNC file",
        command: "python3 \"$CORPUS/dsync-logger.py\" 3",
        filesystems: &[XFS_4K, EXT4_1K],
        expect: &[&["write_amplification"]],
        tolerate: &["flush_heavy", "sync_storm"],
        file: "dsync.log",
        checks: TRACED_AMP,
        ..W
    },
    Workload {
        name: "dd-dsync-1m",
        about: "dd bs=1M count=64 oflag=dsync: whole megabytes, each synced",
        command: "sh \"$CORPUS/dd-dsync-1m.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        ..W
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
        // io_uring's syncs and writes are no system calls: strace sees none.
        checks: &[],
        ..W
    },
    Workload {
        name: "fio-uring-batched",
        about: "fio --ioengine=io_uring --bs=1m --fsync=16: one io_uring fsync per 16 MiB",
        command: "sh \"$CORPUS/fio-uring-batched.sh\"",
        filesystems: &[XFS_4K, EXT4_1K],
        checks: &[],
        ..W
    },
    // --- Databases and servers as shipped by Debian. ---
    Workload {
        name: "pgbench-sync-on",
        about: "PostgreSQL 15, pgbench -c 4 -T 3, synchronous_commit=on",
        setup: "sh \"$CORPUS/pgbench-setup.sh\"",
        command: "sh \"$CORPUS/pgbench.sh\" on",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        // Every commit waits for an fdatasync of the WAL: 8 KiB pages (whole pages are
        // rewritten, so never less than a block) into preallocated 16 MiB segments: about
        // one block of data and a cache flush per commit, no journal (fdatasync of an
        // overwrite), so no amplification. It is a stream of small syncs, but it is the
        // durability contract of synchronous_commit=on and Postgres already group-commits:
        // naming it a storm is defensible, not required. On btrfs each fdatasync also
        // writes log-tree nodes: a real but filesystem-inherent overhead.
        tolerate: &["sync_storm", "flush_heavy"],
        tolerate_on: &[(BTRFS_4K, "write_amplification")],
        ..W
    },
    Workload {
        name: "pgbench-sync-off",
        about: "PostgreSQL 15, pgbench -c 4 -T 3, synchronous_commit=off",
        setup: "sh \"$CORPUS/pgbench-setup.sh\"",
        command: "sh \"$CORPUS/pgbench.sh\" off",
        filesystems: &[XFS_4K, EXT4_4K, BTRFS_4K],
        // Commits do not wait; the WAL writer flushes every 200 ms (hundreds of KiB each):
        // healthy. (The start-up is part of the run, as in -sync-on: the postmaster writes
        // and fsyncs postmaster.pid 7-8 times, 64-129 B each, within ~0.1 s: a one-off
        // burst, not a cadence with a fix.)
        ..W
    },
    Workload {
        name: "sqlite-wal-full",
        about: "sqlite3 WAL, synchronous=FULL: 1,000 INSERTs, each its own transaction",
        command: "sh \"$CORPUS/sqlite-wal.sh\" FULL",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        // One fdatasync of the WAL per row (a 4 KiB page frame + 24-byte header): the same
        // storm as autocommit in rollback mode, one sync per row instead of three or four.
        // Each append grows the WAL, so ext4 and XFS also commit the size: ~4x on the
        // device, which is not the sub-block amplification the finding names, but true.
        expect: &[&["sync_storm"]],
        tolerate: &["flush_heavy", "write_amplification"],
        file: "wal.db-wal",
        ..W
    },
    Workload {
        name: "sqlite-wal-normal",
        about: "sqlite3 WAL, synchronous=NORMAL: 1,000 INSERTs, each its own transaction",
        command: "sh \"$CORPUS/sqlite-wal.sh\" NORMAL",
        filesystems: &[XFS_4K, EXT4_4K, BTRFS_4K],
        // WAL mode with NORMAL syncs only at checkpoints (after 1,000 pages, and at close):
        // healthy. (The CREATE TABLE before the inserts is part of the run: 6 fdatasyncs in
        // rollback mode, once.)
        ..W
    },
    Workload {
        name: "redis-aof-always",
        about: "redis-server appendonly, appendfsync always; redis-benchmark SET, 4 clients",
        command: "sh \"$CORPUS/redis-aof.sh\" always",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        // Each event-loop pass appends its few commands (~60 B each, 4 clients) to the AOF
        // and fdatasyncs it before replying: a sub-block append per sync, each rewriting the
        // tail block and, as the file grows, a journal commit for its size: lab001's shape.
        expect: &[&["write_amplification"]],
        tolerate: &["sync_storm", "flush_heavy"],
        file: "appendonly.aof",
        checks: TRACED_AMP,
        ..W
    },
    Workload {
        name: "redis-aof-everysec",
        about: "redis-server appendonly, appendfsync everysec; redis-benchmark SET, 4 clients",
        command: "sh \"$CORPUS/redis-aof.sh\" everysec",
        filesystems: &[XFS_4K, EXT4_4K],
        // A background fdatasync once a second, of a second's appends: healthy. (At start
        // redis 7 writes its AOF base and manifest and syncs them and the directory: three
        // small syncs, once.)
        ..W
    },
    // --- Tools that write many small files. ---
    Workload {
        name: "git-fsync",
        about: "git unpack-objects, 3,002 loose objects, core.fsync=all, fsyncMethod=fsync",
        setup: "sh \"$CORPUS/git-setup.sh\"",
        command: "sh \"$CORPUS/git-unpack.sh\" fsync",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        // An fsync per loose object (~100 B compressed): each writes a block, commits the
        // journal (new inode, directory entry) and flushes: amplified, and a storm.
        expect: &[&["write_amplification", "sync_storm"]],
        tolerate: &["flush_heavy"],
        // git writes each object as .git/objects/xx/tmp_obj_XXXXXX and links it to its
        // final name; once renamed, the tool can only show the path's tail (".../04/tmp_obj_
        // cR2GRC (inode 49 on 7:1)"), so the name is matched, not the directory (this was
        // "objects/" before the first run).
        file: "tmp_obj_",
        checks: TRACED_AMP,
        ..W
    },
    Workload {
        name: "git-writeout-only",
        about: "git unpack-objects, 3,002 loose objects, core.fsync=all, fsyncMethod=writeout-only",
        setup: "sh \"$CORPUS/git-setup.sh\"",
        command: "sh \"$CORPUS/git-unpack.sh\" writeout-only",
        filesystems: &[XFS_4K, EXT4_4K],
        // sync_file_range per object: it writes the object's one block out and waits for
        // it, but commits no journal and flushes no cache. Each small file costs its block
        // whether written now or by the flusher later: nothing is amplified by the call.
        // Not durable, but not a pathology of I/O. (Written before the run as "does not
        // wait": git 2.39 passes WAIT_BEFORE|WRITE|WAIT_AFTER, so each object waits for its
        // own block, ~0.1-0.3 ms here; the expectation stands, the wait is git's choice for
        // batch mode too.)
        ..W
    },
    Workload {
        name: "git-batch",
        about: "git unpack-objects, 3,002 loose objects, core.fsync=all, fsyncMethod=batch",
        setup: "sh \"$CORPUS/git-setup.sh\"",
        command: "sh \"$CORPUS/git-unpack.sh\" batch",
        filesystems: &[EXT4_4K, XFS_4K, BTRFS_4K],
        // git's recommended fast durable mode: a waited write-out per object (as
        // writeout-only), then one fsync for all.
        ..W
    },
    Workload {
        name: "writeout-batch",
        about: "python: 200 small files per batch, sync_file_range(WRITE) each, one fsync per batch",
        command: "python3 \"$CORPUS/writeout-batch.py\" 3",
        filesystems: &[EXT4_4K, XFS_1K],
        // git's batch shape by hand (write-out started, not waited for, as dpkg's first
        // pass does; git also waits for each), 3 s of it: healthy, as git-batch.
        ..W
    },
    Workload {
        name: "dpkg-unpack",
        about: "dpkg --unpack of 5 .debs (~450 files) into a scratch root, safe I/O",
        setup: "sh \"$CORPUS/dpkg-setup.sh\"",
        command: "sh \"$CORPUS/dpkg-unpack.sh\"",
        filesystems: &[EXT4_4K, XFS_4K, BTRFS_4K],
        // A file's data is written out before its fsync (sync_file_range WRITE, then
        // WAIT_BEFORE), but each fsync still commits the journal and flushes, per file
        // (most under 4 KiB), plus fsyncs of the database's small files at every step: the
        // storm eatmydata and --force-unsafe-io exist for, which a scratch root does not
        // need.
        expect: &[&["sync_storm", "write_amplification"]],
        tolerate: &["flush_heavy"],
        // The extracted files (`*.dpkg-new` until renamed) are most of its syncs. Before the
        // first run this was "/root/" (the scratch root), which cannot match the tool's
        // ".../dist-packages/six.py.dpkg-new (inode 449 on 7:1)" for files renamed since.
        file: "dpkg-new",
        known_miss_on: &[
            (
                EXT4_4K,
                "the findings name the files synced most often (dpkg's database, its control \
                 files), not the ~450 *.dpkg-new each synced once",
            ),
            (
                XFS_4K,
                "nothing WARN or CRIT raised on XFS; not analysed yet",
            ),
            (
                BTRFS_4K,
                "on some runs sync_storm too, naming the dpkg database files synced most \
                 often, not the *.dpkg-new",
            ),
        ],
        ..W
    },
    Workload {
        name: "rsync-tree",
        about: "rsync -a of ~2,400 files (man pages, Perl modules, 24 MiB), then sync -f",
        command: "sh \"$CORPUS/rsync-tree.sh\"",
        filesystems: &[XFS_1K, EXT4_4K],
        ..W
    },
    Workload {
        name: "rsync-fsync",
        about: "rsync -a --fsync of ~1,200 man pages (median 1.5 KiB)",
        command: "sh \"$CORPUS/rsync-fsync.sh\"",
        filesystems: &[EXT4_4K, XFS_4K],
        // An fsync per small file before its rename: a storm of sub-block syncs, each with
        // a journal commit and a flush; one sync at the end would do.
        expect: &[&["sync_storm", "write_amplification"]],
        tolerate: &["flush_heavy"],
        file: "man3/",
        ..W
    },
    // --- Loggers. ---
    Workload {
        name: "journal-fsync",
        about: "python journald-like logger: 60-200 B lines, fsync after each",
        command: "python3 \"$CORPUS/journal-fsync.py\" 3",
        filesystems: &[XFS_4K, EXT4_4K, BTRFS_4K],
        expect: &[&["write_amplification"]],
        tolerate: &["sync_storm", "flush_heavy"],
        file: "system.journal",
        checks: TRACED_AMP,
        ..W
    },
    Workload {
        name: "journal-everysec",
        about: "python logger: a line each millisecond, fsync once a second",
        command: "python3 \"$CORPUS/journal-everysec.py\" 3",
        filesystems: &[EXT4_4K, XFS_1K, BTRFS_4K],
        ..W
    },
    // --- Benchmarks' default layouts. ---
    Workload {
        name: "fio-layout-6k",
        about: "fio default layout (fallocate: unwritten extents), bs=6k direct psync writes",
        command: "sh \"$CORPUS/fio-layout.sh\" 6k",
        filesystems: &[XFS_4K, EXT4_4K, XFS_1K, BTRFS_4K],
        // Every other 6 KiB write ends mid-block in a still-unwritten extent, so the
        // filesystem zeroes the 2 KiB rest of that block with a write of its own (and XFS
        // serialises unaligned direct I/O): the zeroing the tail-write finding names, inside
        // EOF. 6 KiB is six whole blocks on a 1 KiB-block filesystem: nothing there; btrfs
        // falls back to buffered I/O for it: nothing there either.
        expect: &[&["sub_block_tail_write"]],
        quiet_on: &[XFS_1K, BTRFS_4K],
        file: "layout.dat",
        checks: TRACED_DIO,
        ..W
    },
    Workload {
        name: "fio-layout-1536",
        about: "fio default layout (fallocate: unwritten extents), bs=1536 direct psync writes",
        command: "sh \"$CORPUS/fio-layout.sh\" 1536",
        filesystems: &[XFS_4K, XFS_1K],
        // 1.5 blocks on 1 KiB blocks, 3/8 of one on 4 KiB: zeroing on both.
        expect: &[&["sub_block_tail_write"]],
        file: "layout.dat",
        checks: TRACED_DIO,
        ..W
    },
    Workload {
        name: "sysbench-fsync-all",
        about: "sysbench fileio seqwr 4 KiB, --file-fsync-freq=1 over 4 files (fsyncs all after each write)",
        setup: "sh \"$CORPUS/sysbench-setup.sh\"",
        command: "sh \"$CORPUS/sysbench-fsync.sh\"",
        filesystems: &[EXT4_4K, XFS_4K, BTRFS_4K],
        // Four fsyncs per 4 KiB write, three of them of files with nothing new: a storm of
        // syncs (the useful one a block each, with a journal commit for mtime), whose
        // average payload the empty ones dilute. `empty_syncs` came to the tool (f883d76)
        // after this was written and names exactly this pattern: either name is right.
        expect: &[&["sync_storm", "empty_syncs"]],
        tolerate: &["flush_heavy", "write_amplification"],
        file: "test_file",
        ..W
    },
];

/// A figure of the tool next to its oracle's.
#[derive(Clone, Debug)]
pub struct Magnitude {
    /// `device write bytes`, `syncs: fsync`...
    pub what: String,
    pub unit: Unit,
    pub tool: f64,
    pub oracle: f64,
    /// The oracle's source (`diskstats`, `strace`...).
    pub source: &'static str,
    /// Judged (else shown only, e.g. a finding that was not raised).
    pub judged: bool,
    /// Context for the reader (filefrag's extents).
    pub note: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Count,
    Ratio,
}

/// The tolerance: a figure more than this factor off its oracle is wrong.
pub const MAX_FACTOR: f64 = 2.0;

impl Magnitude {
    /// Within a factor of 2 (both zero: equal).
    pub fn within(&self) -> bool {
        if self.tool == 0.0 && self.oracle == 0.0 {
            return true;
        }
        if self.tool <= 0.0 || self.oracle <= 0.0 {
            return false;
        }
        let factor = (self.tool / self.oracle).max(self.oracle / self.tool);
        factor <= MAX_FACTOR
    }

    pub fn off(&self) -> bool {
        self.judged && !self.within()
    }

    fn show(&self, x: f64) -> String {
        match self.unit {
            Unit::Bytes => bytes(x),
            Unit::Count => format!("{x:.0}"),
            Unit::Ratio => format!("{x:.1}x"),
        }
    }

    /// `syncs: fsync 300 vs 300 (strace)`.
    pub fn describe(&self) -> String {
        let mark = if !self.judged {
            " (not judged)"
        } else if self.within() {
            ""
        } else {
            " **OFF**"
        };
        let note = if self.note.is_empty() {
            String::new()
        } else {
            format!("; {}", self.note)
        };
        format!(
            "{} {} vs {} ({}){mark}{note}",
            self.what,
            self.show(self.tool),
            self.show(self.oracle),
            self.source
        )
    }
}

fn bytes(x: f64) -> String {
    if x >= f64::from(1u32 << 20) {
        format!("{:.1} MiB", x / f64::from(1u32 << 20))
    } else if x >= 1024.0 {
        format!("{:.1} KiB", x / 1024.0)
    } else {
        format!("{x:.0} B")
    }
}

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
    pub magnitudes: Vec<Magnitude>,
    /// The whole cell (filesystem, setup, tool, workload, settling).
    pub seconds: f64,
    /// The workload alone.
    pub workload_seconds: f64,
    /// Why this cell is known to be wrong (see [`Workload::known_miss_on`]).
    pub known_miss: Option<&'static str>,
}

impl Cell {
    pub fn findings_correct(&self) -> bool {
        self.false_negatives == 0 && self.false_positives.is_empty() && self.unnamed.is_none()
    }

    pub fn magnitudes_off(&self) -> Vec<&Magnitude> {
        self.magnitudes.iter().filter(|m| m.off()).collect()
    }

    pub fn correct(&self) -> bool {
        self.findings_correct() && self.magnitudes_off().is_empty()
    }
}

pub struct Report {
    pub cells: Vec<Cell>,
    pub seconds: f64,
}

#[expect(clippy::cast_precision_loss, reason = "ratios of small counts")]
fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        1.0
    } else {
        num as f64 / den as f64
    }
}

#[expect(clippy::cast_precision_loss, reason = "figures compared within 2x")]
fn float(x: u64) -> f64 {
    x as f64
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
            "| workload | fs | expected (WARN/CRIT) | raised (WARN/CRIT) | verdict | magnitudes: tool vs oracle |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|");
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
            let mut verdicts = Vec::new();
            if c.false_negatives > 0 {
                verdicts.push("MISSED".to_string());
            }
            if !c.false_positives.is_empty() {
                verdicts.push(format!("FALSE POSITIVE ({})", c.false_positives.join(", ")));
            }
            if let Some(kind) = &c.unnamed {
                verdicts.push(format!("{kind} DOES NOT NAME THE FILE"));
            }
            let off = c.magnitudes_off();
            if !off.is_empty() {
                verdicts.push(format!(
                    "MAGNITUDE OFF ({})",
                    off.iter()
                        .map(|m| m.what.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            let mut verdict = if verdicts.is_empty() {
                "ok".to_string()
            } else {
                verdicts.join("; ")
            };
            if let Some(why) = c.known_miss {
                verdict = format!("{verdict} (known: {why})");
            }
            let magnitudes = c
                .magnitudes
                .iter()
                .map(Magnitude::describe)
                .collect::<Vec<_>>()
                .join("<br>");
            let _ = writeln!(
                out,
                "| `{}` ({}) | {} | {expected} | {raised} | {verdict} | {magnitudes} |",
                c.workload, c.about, c.fs
            );
        }
        let judged: usize = self
            .cells
            .iter()
            .map(|c| c.magnitudes.iter().filter(|m| m.judged).count())
            .sum();
        let off: usize = self.cells.iter().map(|c| c.magnitudes_off().len()).sum();
        let programs: BTreeSet<&str> = self.cells.iter().map(|c| c.workload).collect();
        let _ = writeln!(
            out,
            "\n{} runs of {} workloads: {} true positives, {} false negatives, {} false positives; \
             precision {:.2}, recall {:.2}. Magnitudes: {} compared with their oracles, {} more \
             than {MAX_FACTOR}x off. {} runs wrong in all. {:.0} s.",
            self.cells.len(),
            programs.len(),
            self.true_positives(),
            self.false_negatives(),
            self.false_positives(),
            self.precision(),
            self.recall(),
            judged,
            off,
            self.cells.iter().filter(|c| !c.correct()).count(),
            self.seconds,
        );
        out
    }
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
                "eval: {} on {}: raised {:?} in {:.1}s ({:.1}s of workload){}{}",
                w.name,
                fs,
                cell.raised.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                cell.seconds,
                cell.workload_seconds,
                if cell.correct() { "" } else { "  <-- WRONG" },
                if off.is_empty() {
                    String::new()
                } else {
                    format!("\n      {}", off.join("\n      "))
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

/// Longer than any workload takes (the longest run ~5 s).
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The system calls strace follows: the sync calls, the writes, and the opens (for the flags
/// and the path of each fd).
const STRACED: &str = "fsync,fdatasync,sync_file_range,syncfs,sync,msync,write,pwrite64,writev,\
                       pwritev,pwritev2,open,openat,creat";

fn run_one(w: &Workload, fs_kind: Fs) -> Cell {
    static RUN: AtomicU32 = AtomicU32::new(0);
    let started = Instant::now();
    let fs = LoopFs::with_block(fs_kind.kind, 1024, fs_kind.block);
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).expect("create the eval cache directory");
    let env = |command: &mut Command| {
        command
            .env("D", &fs.mountpoint)
            .env("CORPUS", corpus_dir())
            .env("CACHE", &cache);
    };
    if !w.setup.is_empty() {
        let mut setup = Command::new("sh");
        setup.arg("-c").arg(w.setup);
        env(&mut setup);
        let out = setup
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("start the setup of {}: {e}", w.name));
        assert!(
            out.status.success(),
            "setup of {} on {fs_kind} failed: {}\n{}{}",
            w.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    crate::sh("sync", &["-f", fs.mountpoint.to_str().unwrap()]);

    let traced = !w.checks.is_empty();
    let log = std::env::temp_dir().join(format!(
        "iotop-bpf-eval-strace-{}-{}.txt",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    let before = diskstats(&fs.name);
    let run = JsonRun::start(&[]);
    let workload_started = Instant::now();
    let mut command = if traced {
        let mut c = Command::new("strace");
        c.args([
            "-f",
            "-qq",
            "--seccomp-bpf",
            "-y",
            "-s",
            "0",
            "-e",
            "signal=none",
        ])
        .args(["-e", &format!("trace={STRACED}")])
        .arg("-o")
        .arg(&log)
        .args(["sh", "-c", w.command]);
        c
    } else {
        let mut c = Command::new("sh");
        c.arg("-c").arg(w.command);
        c
    };
    env(&mut command);
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start workload {}: {e}", w.name));
    let top = child.id();
    // pid -> its start time (field 22 of /proc/PID/stat), to end only our own leftovers.
    let pids = Arc::new(Mutex::new(BTreeMap::from([(top, start_time(top))])));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (pids, done) = (Arc::clone(&pids), Arc::clone(&done));
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                collect_descendants(&pids);
                // A workload that hangs (a server that never stops) fails instead of
                // holding the whole run.
                if workload_started.elapsed() > WORKLOAD_TIMEOUT {
                    if let Ok(pids) = pids.lock() {
                        end_leftovers(&pids);
                    }
                    break;
                }
                thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for workload {}: {e}", w.name));
    let workload_seconds = workload_started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let pids = pids.lock().map(|p| p.clone()).unwrap_or_default();
    end_leftovers(&pids);
    if !output.status.success() {
        let _ = run.stop();
        let _ = std::fs::remove_file(&log);
        panic!(
            "workload {} on {fs_kind} failed: {}\n{}",
            w.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Let the last sync calls settle and an INFO finding persist past its streak.
    thread::sleep(Duration::from_millis(1_500));
    let intervals = run.stop();
    let after = diskstats(&fs.name);
    let trace = if traced {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        Some(Trace::parse(&text, &fs.mountpoint))
    } else {
        None
    };
    // Polling /proc misses a process that lives less than its period (a sqlite3 that
    // creates a table); under strace, every process of the tree is in the log.
    let mut pid_set: BTreeSet<u32> = pids.keys().copied().collect();
    if let Some(trace) = &trace {
        pid_set.extend(trace.pids.iter().copied());
    }
    let raised = raised_for(&intervals, &pid_set, &fs.dev);
    if let Some(keep) = std::env::var_os("IOTOP_BPF_EVAL_KEEP") {
        keep_run(
            Path::new(&keep),
            w.name,
            fs_kind,
            &intervals,
            &pid_set,
            traced.then_some(&log),
        );
    }
    let _ = std::fs::remove_file(&log);
    let filefrag = if w.checks.contains(&Check::Zeroing) {
        trace
            .as_ref()
            .map(|t| filefrag_summary(t.direct_files()))
            .unwrap_or_default()
    } else {
        String::new()
    };
    // The strace process itself is no part of the workload's figures (it is not traced).
    let tree: BTreeSet<u32> = if traced {
        pid_set.iter().copied().filter(|&p| p != top).collect()
    } else {
        pid_set.clone()
    };
    let magnitudes = magnitudes(
        w,
        fs_kind,
        &Figures::of(&intervals, &tree, &fs.name),
        &before,
        &after,
        trace.as_ref(),
        filefrag,
    );
    drop(fs);
    score(
        w,
        fs_kind,
        raised,
        magnitudes,
        started.elapsed().as_secs_f64(),
        workload_seconds,
    )
}

/// `IOTOP_BPF_EVAL_KEEP=DIR` keeps each run's JSON intervals, its process tree and its strace
/// log there, for a closer look (`NAME-FS.jsonl`, `NAME-FS.pids`, `NAME-FS.strace`).
fn keep_run(
    dir: &Path,
    name: &str,
    fs: Fs,
    intervals: &[Value],
    pids: &BTreeSet<u32>,
    log: Option<&PathBuf>,
) {
    let _ = std::fs::create_dir_all(dir);
    let stem = format!("{name}-{}{}k", fs.kind, fs.block / 1024);
    let lines: String = intervals.iter().map(|i| format!("{i}\n")).collect();
    let _ = std::fs::write(dir.join(format!("{stem}.jsonl")), lines);
    let pids: String = pids.iter().map(|p| format!("{p}\n")).collect();
    let _ = std::fs::write(dir.join(format!("{stem}.pids")), pids);
    if let Some(log) = log {
        let _ = std::fs::copy(log, dir.join(format!("{stem}.strace")));
    }
}

/// Adds every process whose parent is already in `pids`.
fn collect_descendants(pids: &Mutex<BTreeMap<u32, u64>>) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let Ok(mut pids) = pids.lock() else { return };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pids.contains_key(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rfind(')')
            .map(|i| stat[i + 1..].split_whitespace().collect())
            .unwrap_or_default();
        // After the command: state (0), ppid (1), ..., starttime (19).
        let ppid = fields.get(1).and_then(|p| p.parse::<u32>().ok());
        if ppid.is_some_and(|ppid| pids.contains_key(&ppid)) {
            let start = fields.get(19).and_then(|s| s.parse().ok()).unwrap_or(0);
            pids.insert(pid, start);
        }
    }
}

/// A process's start time in clock ticks after boot (0 when gone).
fn start_time(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let i = stat.rfind(')')?;
            stat[i + 1..].split_whitespace().nth(19)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Ends the workload's processes still alive (a server a failed script left behind would
/// keep its filesystem busy), each only if it is still the process we saw start.
fn end_leftovers(pids: &BTreeMap<u32, u64>) {
    for (&pid, &start) in pids {
        if start != 0 && start_time(pid) == start {
            // SAFETY: kill with a pid we started (checked by its start time) and a signal.
            unsafe { libc::kill(i32::try_from(pid).unwrap_or(i32::MAX), libc::SIGKILL) };
        }
    }
}

/// /proc/diskstats of one device: (sectors written, writes completed).
#[derive(Clone, Copy, Debug, Default)]
struct DiskStat {
    write_bytes: u64,
    writes: u64,
}

fn diskstats(name: &str) -> DiskStat {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&name))
        .map(|f| {
            let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            DiskStat {
                writes: n(7),
                write_bytes: n(9) * 512,
            }
        })
        .unwrap_or_default()
}

/// The tool's figures for the workload, from its JSON intervals.
#[derive(Default, Debug)]
struct Figures {
    disk_write_bytes: u64,
    disk_writes: u64,
    syncs: u64,
    kinds: BTreeMap<String, u64>,
    logical_write_bytes: u64,
    /// `amplification` of each `write_amplification` finding of the workload's processes.
    amplification: Vec<f64>,
    zeroing_writes: u64,
    zeroed_bytes: u64,
    /// The same from the `sub_block_tail_write` findings' evidence, summed over intervals.
    finding_zeroing: Option<(u64, u64)>,
    /// Every process of the tree that has a row in some interval: its command, its
    /// `totals.logical_write_bytes` and the interval of its first row.
    listed: BTreeMap<u32, (String, u64, usize)>,
}

impl Figures {
    fn of(intervals: &[Value], pids: &BTreeSet<u32>, disk: &str) -> Self {
        let mut f = Self::default();
        let n = |v: &Value, field: &str| v[field].as_u64().unwrap_or(0);
        for (index, interval) in intervals.iter().enumerate() {
            for d in interval["disks"].as_array().into_iter().flatten() {
                if d["name"] == disk {
                    f.disk_write_bytes += n(d, "write_bytes");
                    f.disk_writes += n(d, "writes");
                }
            }
            for p in interval["processes"].as_array().into_iter().flatten() {
                let Some(pid) = p["pid"].as_u64().and_then(|p| u32::try_from(p).ok()) else {
                    continue;
                };
                if !pids.contains(&pid) {
                    continue;
                }
                let total = n(&p["totals"], "logical_write_bytes");
                let comm = p["comm"].as_str().unwrap_or("?").to_string();
                let row = f.listed.entry(pid).or_insert((comm, 0, index));
                row.1 = row.1.max(total);
                f.syncs += n(p, "syncs");
                for (kind, count) in p["sync_kinds"].as_object().into_iter().flatten() {
                    *f.kinds.entry(kind.clone()).or_default() += count.as_u64().unwrap_or(0);
                }
                let dio = &p["direct_io"];
                f.zeroing_writes += n(dio, "zeroing_writes");
                f.zeroed_bytes += n(dio, "zeroed_tail_bytes")
                    + n(dio, "zeroed_head_bytes")
                    + n(dio, "zeroed_inside_bytes");
            }
            for finding in interval["findings"].as_array().into_iter().flatten() {
                let mine = finding["pid"]
                    .as_u64()
                    .and_then(|p| u32::try_from(p).ok())
                    .is_some_and(|p| pids.contains(&p));
                if mine
                    && finding["kind"] == "write_amplification"
                    && let Some(x) = finding["evidence"]["amplification"].as_f64()
                {
                    f.amplification.push(x);
                }
                if mine && finding["kind"] == "sub_block_tail_write" {
                    let e = &finding["evidence"];
                    let z = f.finding_zeroing.get_or_insert((0, 0));
                    z.0 += n(e, "zeroing_writes");
                    z.1 += n(e, "zeroed_bytes");
                }
            }
        }
        f.logical_write_bytes = f.listed.values().map(|(_, total, _)| total).sum();
        f
    }
}

/// What strace saw the workload do.
#[derive(Default, Debug)]
struct Trace {
    /// Sync calls per kind, named as the tool names them.
    kinds: BTreeMap<String, u64>,
    /// Bytes written by write, pwrite64, writev, pwritev, pwritev2 (their results), any fd.
    write_bytes: u64,
    /// The same per process (strace prints thread ids: a multi-threaded writer's threads
    /// are summed under their own ids, so this is only used to name unlisted writers).
    write_bytes_by: BTreeMap<u32, u64>,
    /// Of those, to files on the workload's filesystem.
    fs_write_bytes: u64,
    /// Direct writes to files on the filesystem, in order: (path, offset, bytes).
    direct_writes: Vec<(String, u64, u64)>,
    /// Every process (thread) id in the log.
    pids: BTreeSet<u32>,
}

/// What an open said about a path.
#[derive(Clone, Copy, Default, Debug)]
struct OpenFile {
    dsync: bool,
    osync: bool,
    direct: bool,
    append: bool,
    /// The position of the last open's writes (one writer per file in the corpus).
    pos: u64,
    size: u64,
}

impl Trace {
    /// Parses `strace -f -y -s 0` output (`PID call(args) = result`, with
    /// `<unfinished ...>` / `<... call resumed>` pairs).
    fn parse(text: &str, mountpoint: &Path) -> Self {
        let mut t = Self::default();
        let mount = format!("{}/", mountpoint.display());
        let mut pending: HashMap<&str, String> = HashMap::new();
        let mut files: HashMap<String, OpenFile> = HashMap::new();
        for line in text.lines() {
            let Some((pid, rest)) = line.split_once(' ') else {
                continue;
            };
            let rest = rest.trim_start();
            if let Ok(pid) = pid.parse() {
                t.pids.insert(pid);
            }
            let full = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
                pending.insert(pid, head.to_string());
                continue;
            } else if rest.starts_with("<... ") {
                let Some(head) = pending.remove(pid) else {
                    continue;
                };
                let Some(i) = rest.find("resumed>") else {
                    continue;
                };
                format!("{head}{}", &rest[i + "resumed>".len()..])
            } else {
                rest.to_string()
            };
            t.call(pid.parse().unwrap_or(0), &full, &mount, &mut files);
        }
        t
    }

    fn call(&mut self, pid: u32, call: &str, mount: &str, files: &mut HashMap<String, OpenFile>) {
        let Some(open_paren) = call.find('(') else {
            return;
        };
        let name = &call[..open_paren];
        // `call(args) = result`; strace pads resumed calls: `call(args)      = result`.
        let Some(eq) = call.rfind(" = ") else {
            return;
        };
        let Some(close) = call[..eq].rfind(')') else {
            return;
        };
        if close < open_paren || !call[close + 1..eq].trim().is_empty() {
            return;
        }
        let args = &call[open_paren + 1..close];
        let result = call[eq + 3..].trim_start();
        let ret: i64 = result
            .split([' ', '<'])
            .next()
            .and_then(|r| r.parse().ok())
            .unwrap_or(-1);
        if ret < 0 {
            return;
        }
        let ret = ret.unsigned_abs();
        let bump = |t: &mut Self, kind: &str| *t.kinds.entry(kind.to_string()).or_default() += 1;
        match name {
            // Only starting write-back (no wait flag) is not a wait for durability: the tool
            // names it apart (and leaves it out of `syncs`).
            "sync_file_range" if args.ends_with(", SYNC_FILE_RANGE_WRITE") => {
                bump(self, SRF_WRITE);
            }
            "fsync" | "fdatasync" | "sync_file_range" | "syncfs" | "sync" => bump(self, name),
            "msync" if args.contains("MS_SYNC") => bump(self, "msync"),
            "open" | "openat" | "creat" => {
                let Some(path) = fd_path(result) else {
                    return;
                };
                let old = files.get(&path).copied().unwrap_or_default();
                let append = args.contains("O_APPEND");
                let file = OpenFile {
                    dsync: args.contains("O_DSYNC"),
                    osync: args.contains("O_SYNC"),
                    direct: args.contains("O_DIRECT"),
                    append,
                    pos: if append { old.size } else { 0 },
                    size: if args.contains("O_TRUNC") || name == "creat" {
                        0
                    } else {
                        old.size
                    },
                };
                files.insert(path, file);
            }
            "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => {
                // Only what can reach a disk, as the tool counts: a file, not a pipe or a
                // socket (no path), a terminal or /dev/null (rsync's sender writes every
                // byte it copies into a socket to the receiver).
                let Some(path) = fd_path(args) else {
                    return;
                };
                if ["/dev/", "/proc/", "/sys/"]
                    .iter()
                    .any(|p| path.starts_with(p) && !path.starts_with("/dev/shm/"))
                {
                    return;
                }
                self.write_bytes += ret;
                *self.write_bytes_by.entry(pid).or_default() += ret;
                if !path.starts_with(mount) {
                    return;
                }
                self.fs_write_bytes += ret;
                let file = files.entry(path.clone()).or_default();
                let positional = name != "write" && name != "writev";
                let offset = if positional {
                    // The offset is the last argument (pwritev2: the one before the flags).
                    let parts: Vec<&str> = args.rsplit(", ").collect();
                    let at = if name == "pwritev2" { 1 } else { 0 };
                    parts.get(at).and_then(|o| o.parse().ok()).unwrap_or(0)
                } else if file.append {
                    file.size
                } else {
                    file.pos
                };
                if !positional {
                    file.pos = offset + ret;
                }
                file.size = file.size.max(offset + ret);
                let flags_dsync = name == "pwritev2" && args.contains("RWF_DSYNC");
                let flags_sync = name == "pwritev2" && args.contains("RWF_SYNC");
                if file.direct && ret > 0 {
                    self.direct_writes.push((path.clone(), offset, ret));
                }
                if ret > 0 {
                    if file.osync || flags_sync {
                        bump(self, "O_SYNC write");
                    } else if file.dsync || flags_dsync {
                        bump(self, "O_DSYNC write");
                    }
                }
            }
            _ => {}
        }
    }

    /// Calls per kind as the tool's JSON names them: before `sync_file_range(WRITE)` was a
    /// kind of its own (`tool_splits`), every sync_file_range was a `sync_file_range`.
    fn kinds_for(&self, tool_splits: bool) -> BTreeMap<String, u64> {
        let mut kinds = self.kinds.clone();
        if !tool_splits && let Some(n) = kinds.remove(SRF_WRITE) {
            *kinds.entry("sync_file_range".to_string()).or_default() += n;
        }
        kinds
    }

    fn direct_files(&self) -> BTreeSet<&str> {
        self.direct_writes
            .iter()
            .map(|(p, _, _)| p.as_str())
            .collect()
    }

    /// What the filesystem zeroes for the direct writes, predicted from its block size:
    /// (writes that zero a block's tail after their end, bytes zeroed before and after).
    /// Every block starts unwritten (new files, or fio's fallocated layout: `filefrag -v`
    /// confirms the extents left unwritten); a block becomes written once a write covers
    /// any of it (the filesystem zeroes the rest of it in the same call).
    fn predicted_zeroing(&self, block: u64) -> (u64, u64) {
        let mut written: HashMap<&str, BTreeSet<u64>> = HashMap::new();
        let (mut tail_writes, mut zeroed) = (0, 0);
        for (path, offset, len) in &self.direct_writes {
            let done = written.entry(path.as_str()).or_default();
            let (start, end) = (*offset, offset + len);
            let (first, last) = (start / block, (end - 1) / block);
            if start % block != 0 && !done.contains(&first) {
                zeroed += start % block;
            }
            if end % block != 0 && !done.contains(&last) {
                tail_writes += 1;
                zeroed += block - end % block;
            }
            done.extend(first..=last);
        }
        (tail_writes, zeroed)
    }
}

/// `sync_file_range(fd, off, len, SYNC_FILE_RANGE_WRITE)`: starts write-back, waits for
/// nothing (git's writeout-only, dpkg's first pass).
const SRF_WRITE: &str = "sync_file_range(WRITE)";

/// The path strace -y printed after an fd: `3</tmp/x/f>` -> `/tmp/x/f`.
fn fd_path(text: &str) -> Option<String> {
    let start = text.find('<')? + 1;
    let end = start + text[start..].find('>')?;
    let path = &text[start..end];
    path.starts_with('/').then(|| path.to_string())
}

/// `layout.dat: 3 extents, 1 unwritten (12.0 MiB of 64.0 MiB written)` per file.
fn filefrag_summary(paths: BTreeSet<&str>) -> String {
    let mut parts = Vec::new();
    for path in paths {
        let Ok(out) = Command::new("filefrag").args(["-v", path]).output() else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let (mut extents, mut unwritten, mut blocks, mut unwritten_blocks) =
            (0u64, 0u64, 0u64, 0u64);
        for line in text.lines() {
            // `   0:        0..    4095:      24..   4119:   4096:             unwritten`
            let fields: Vec<&str> = line.split(':').map(str::trim).collect();
            if fields.len() < 4 || fields[0].parse::<u64>().is_err() {
                continue;
            }
            let length: u64 = fields[3].parse().unwrap_or(0);
            extents += 1;
            blocks += length;
            if line.contains("unwritten") {
                unwritten += 1;
                unwritten_blocks += length;
            }
        }
        let name = Path::new(path)
            .file_name()
            .map_or(path.into(), |n| n.to_string_lossy());
        parts.push(format!(
            "filefrag {name}: {extents} extents, {unwritten} unwritten ({unwritten_blocks} of {blocks} blocks)"
        ));
    }
    if parts.len() > 3 {
        let n = parts.len();
        parts.truncate(2);
        parts.push(format!("{} more files", n - 2));
    }
    parts.join(", ")
}

fn magnitudes(
    w: &Workload,
    fs: Fs,
    tool: &Figures,
    before: &DiskStat,
    after: &DiskStat,
    trace: Option<&Trace>,
    filefrag: String,
) -> Vec<Magnitude> {
    let device_bytes = after.write_bytes.saturating_sub(before.write_bytes);
    let m = |what: String, unit, tool: u64, oracle: u64, source| Magnitude {
        what,
        unit,
        tool: float(tool),
        oracle: float(oracle),
        source,
        judged: true,
        note: String::new(),
    };
    let mut out = vec![
        m(
            "device write bytes".into(),
            Unit::Bytes,
            tool.disk_write_bytes,
            device_bytes,
            "diskstats",
        ),
        m(
            "device write requests".into(),
            Unit::Count,
            tool.disk_writes,
            after.writes.saturating_sub(before.writes),
            "diskstats",
        ),
    ];
    let Some(trace) = trace else {
        return out;
    };
    if w.checks.contains(&Check::Syncs) {
        let splits = tool.kinds.contains_key(SRF_WRITE);
        let oracle_kinds = trace.kinds_for(splits);
        // `syncs` leaves write-back starts out where the tool names them apart.
        let oracle_syncs = oracle_kinds
            .iter()
            .filter(|(kind, _)| kind.as_str() != SRF_WRITE)
            .map(|(_, n)| n)
            .sum();
        out.push(m(
            "syncs".into(),
            Unit::Count,
            tool.syncs,
            oracle_syncs,
            "strace",
        ));
        let kinds: BTreeSet<&String> = tool.kinds.keys().chain(oracle_kinds.keys()).collect();
        // One kind alone is the total again.
        if kinds.len() > 1 {
            for kind in kinds {
                out.push(m(
                    format!("syncs: {kind}"),
                    Unit::Count,
                    tool.kinds.get(kind).copied().unwrap_or(0),
                    oracle_kinds.get(kind).copied().unwrap_or(0),
                    "strace",
                ));
            }
        } else if let Some(kind) = kinds.first()
            && let Some(last) = out.last_mut()
        {
            last.what = format!("syncs ({kind})");
        }
    }
    if w.checks.contains(&Check::LogicalWrites) {
        let mut logical = m(
            "logical write bytes".into(),
            Unit::Bytes,
            tool.logical_write_bytes,
            trace.write_bytes,
            "strace",
        );
        logical.note = logical_gaps(tool, trace);
        out.push(logical);
    }
    if w.checks.contains(&Check::Amplification) {
        let oracle = if trace.fs_write_bytes == 0 {
            0.0
        } else {
            float(device_bytes) / float(trace.fs_write_bytes)
        };
        let mut values = tool.amplification.clone();
        values.sort_by(f64::total_cmp);
        let median = values.get(values.len() / 2).copied();
        out.push(Magnitude {
            what: "write_amplification".into(),
            unit: Unit::Ratio,
            tool: median.unwrap_or(0.0),
            oracle,
            source: "diskstats / strace",
            judged: median.is_some(),
            note: if median.is_some() {
                String::new()
            } else {
                "finding not raised".into()
            },
        });
    }
    if w.checks.contains(&Check::Zeroing) {
        // btrfs takes no direct write that is not aligned to its sector size: it falls back
        // to buffered I/O, and nothing is zeroed.
        let (tail_writes, zeroed) = if fs.kind == "btrfs" {
            (0, 0)
        } else {
            trace.predicted_zeroing(u64::from(fs.block))
        };
        let mut writes = m(
            "zeroing writes".into(),
            Unit::Count,
            tool.zeroing_writes,
            tail_writes,
            "strace + geometry",
        );
        // The finding may count what the process row does not (zeroing inside EOF).
        if let Some((n, z)) = tool.finding_zeroing
            && n != tool.zeroing_writes
        {
            writes.note = format!("the finding's evidence: {n} writes, {}", bytes(float(z)));
        }
        out.push(writes);
        let mut bytes = m(
            "zeroed bytes".into(),
            Unit::Bytes,
            tool.zeroed_bytes,
            zeroed,
            "strace + geometry",
        );
        bytes.note = filefrag;
        out.push(bytes);
    }
    out
}

/// Where the tool's logical write bytes fall short of strace's, process by process: writers
/// the JSON never lists (no device I/O, sync or D time of their own: a process writing only
/// into pipes), and listed ones whose totals hold less than they wrote (with the interval of
/// their first row: bytes written before it are not in `totals`).
fn logical_gaps(tool: &Figures, trace: &Trace) -> String {
    let mut parts = Vec::new();
    let unlisted: Vec<u64> = trace
        .write_bytes_by
        .iter()
        .filter(|(pid, bytes)| **bytes > 0 && !tool.listed.contains_key(pid))
        .map(|(_, &bytes)| bytes)
        .collect();
    if !unlisted.is_empty() {
        parts.push(format!(
            "{} of it by {} processes or threads never listed",
            bytes(float(unlisted.iter().sum())),
            unlisted.len()
        ));
    }
    let mut short: Vec<(u64, String)> = tool
        .listed
        .iter()
        .filter_map(|(pid, (comm, total, first))| {
            let wrote = trace.write_bytes_by.get(pid).copied().unwrap_or(0);
            let missing = wrote.saturating_sub(*total);
            (missing > 64 << 10 && missing * 10 > wrote).then(|| {
                (
                    missing,
                    format!(
                        "{comm} (pid {pid}) {} of {} (first row: interval {first})",
                        bytes(float(*total)),
                        bytes(float(wrote))
                    ),
                )
            })
        })
        .collect();
    short.sort_by_key(|s| std::cmp::Reverse(s.0));
    parts.extend(short.into_iter().take(2).map(|(_, text)| text));
    parts.join("; ")
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

fn score(
    w: &Workload,
    fs: Fs,
    raised: Vec<(String, String)>,
    magnitudes: Vec<Magnitude>,
    seconds: f64,
    workload_seconds: f64,
) -> Cell {
    let expect: &[&[&str]] = if w.quiet_on.contains(&fs) {
        &[]
    } else {
        w.expect
    };
    let is_raised = |kind: &str| raised.iter().any(|(k, _)| k == kind);
    let true_positives = expect
        .iter()
        .filter(|group| group.iter().any(|k| is_raised(k)))
        .count();
    let false_positives = raised
        .iter()
        .map(|(k, _)| k)
        .filter(|k| {
            !expect.iter().any(|group| group.contains(&k.as_str()))
                && !w.tolerate.contains(&k.as_str())
                && !w.tolerate_on.contains(&(fs, k.as_str()))
        })
        .cloned()
        .collect();
    let unnamed = raised
        .iter()
        .filter(|(k, _)| expect.iter().any(|group| group.contains(&k.as_str())))
        .find(|(_, summary)| !summary.contains(w.file))
        .map(|(k, _)| k.clone());
    Cell {
        workload: w.name,
        about: w.about,
        fs,
        expected: expect.iter().map(|group| group.join(" or ")).collect(),
        true_positives,
        false_negatives: expect.len() - true_positives,
        false_positives,
        unnamed,
        raised,
        magnitudes,
        seconds,
        workload_seconds,
        known_miss: w
            .known_miss_on
            .iter()
            .find(|(on, _)| *on == fs)
            .map(|&(_, why)| why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"100 openat(AT_FDCWD</m>, "/m/d.out", O_WRONLY|O_CREAT|O_TRUNC|O_DSYNC, 0666) = 3</m/d.out>
100 write(3</m/d.out>, ""..., 128) = 128
100 write(1<pipe:[7]>, ""..., 10) = 10
100 write(2</dev/pts/0>, ""..., 12) = 12
101 fsync(7</m/a.aof> <unfinished ...>
100 write(3</m/d.out>, ""..., 128 <unfinished ...>
101 <... fsync resumed>)              = 0
100 <... write resumed>)                = 128
101 fdatasync(4</m/x>) = -1 EIO (Input/output error)
101 sync_file_range(5</m/o>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0
101 msync(0x7f, 4096, MS_ASYNC) = 0
101 msync(0x7f, 4096, MS_SYNC) = 0
101 pwrite64(6</elsewhere/f>, ""..., 100, 4096) = 100
102 openat(AT_FDCWD</m>, "/m/dio", O_WRONLY|O_CREAT|O_DIRECT, 0644) = 3</m/dio>
102 pwrite64(3</m/dio>, ""..., 6144, 0) = 6144
102 pwrite64(3</m/dio>, ""..., 6144, 6144) = 6144
102 pwritev2(3</m/dio>, [{iov_base=""..., iov_len=512}], 1, 12288, RWF_DSYNC) = 512
"#;

    #[test]
    fn strace_log_gives_sync_kinds_and_bytes() {
        let t = Trace::parse(LOG, Path::new("/m"));
        let kinds: Vec<(&str, u64)> = t.kinds.iter().map(|(k, &n)| (k.as_str(), n)).collect();
        assert_eq!(
            kinds,
            [
                ("O_DSYNC write", 3),
                ("fsync", 1),
                ("msync", 1),
                ("sync_file_range(WRITE)", 1)
            ]
        );
        assert_eq!(t.kinds_for(false).get("sync_file_range"), Some(&1));
        assert_eq!(t.kinds_for(false).get(SRF_WRITE), None);
        // Not the 10 bytes into a pipe: they cannot reach a disk.
        assert_eq!(t.write_bytes, 128 * 2 + 100 + 6144 * 2 + 512);
        assert_eq!(t.fs_write_bytes, 128 * 2 + 6144 * 2 + 512);
        assert_eq!(
            t.direct_writes,
            [
                ("/m/dio".to_string(), 0, 6144),
                ("/m/dio".to_string(), 6144, 6144),
                ("/m/dio".to_string(), 12288, 512)
            ]
        );
    }

    #[test]
    fn zeroing_follows_the_block_size() {
        let t = Trace::parse(LOG, Path::new("/m"));
        // 4 KiB blocks: [0, 6k) zeroes 2 KiB after its end; [6k, 12k) starts in a block the
        // first one wrote and ends on a boundary; [12k, 12.5k) zeroes 3.5 KiB.
        assert_eq!(t.predicted_zeroing(4096), (2, 2048 + 3584));
        // 1 KiB blocks: only the 512-byte write is partial.
        assert_eq!(t.predicted_zeroing(1024), (1, 512));
        // Appends of 3584 bytes from 0 on 4 KiB blocks: every call but each eighth ends
        // inside a fresh block.
        let log: String = (0..16)
            .map(|i| format!("1 pwrite64(3</m/a>, \"\"..., 3584, {}) = 3584\n", i * 3584))
            .collect();
        let log = format!("1 openat(AT_FDCWD</m>, \"/m/a\", O_WRONLY|O_DIRECT) = 3</m/a>\n{log}");
        let t = Trace::parse(&log, Path::new("/m"));
        assert_eq!(t.predicted_zeroing(4096).0, 14);
    }

    #[test]
    fn magnitudes_within_twice() {
        let m = |tool, oracle| Magnitude {
            what: String::new(),
            unit: Unit::Count,
            tool,
            oracle,
            source: "",
            judged: true,
            note: String::new(),
        };
        assert!(m(0.0, 0.0).within());
        assert!(m(100.0, 200.0).within());
        assert!(!m(100.0, 201.0).within());
        assert!(!m(0.0, 1.0).within());
        assert!(!m(3.0, 1.0).within());
    }
}
