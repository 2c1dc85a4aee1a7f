//! Programs the detectors were not designed on: everyday tools tried after the findings were
//! written, so that the corpus is not only programs chosen for a finding. Each expectation was
//! written before its first run. All expect nothing, because that is what an engineer would
//! say of them: a finding raised here is a false alarm. Their disk figures are judged against
//! diskstats like every run's.

use super::corpus::W;
use super::*;

pub const OUTSIDE: &[Workload] = &[
    Workload {
        name: "grep-cold-tree",
        about: "grep -r through ~2,400 cold files (man pages, Perl modules) for a missing word",
        setup: "sh \"$CORPUS/tree-setup.sh\"",
        command: "sh \"$CORPUS/grep-cold-tree.sh\"",
        filesystems: &[EXT4_4K, XFS_4K],
        // Written before its first run: each file read whole once, readahead sized to small
        // files, every page it brings used: nothing (no read_amplification).
        checks: &[],
        ..W
    },
    Workload {
        name: "tar-zstd",
        about: "tar of the same cold tree piped into zstd -1, one archive written",
        setup: "sh \"$CORPUS/tree-setup.sh\"",
        command: "sh \"$CORPUS/tar-zstd.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        // Written before its first run: sequential whole-file reads and one buffered write
        // left to write-back, no sync: nothing.
        checks: &[],
        ..W
    },
    Workload {
        name: "sort-external",
        about: "sort -S 8M of 4 million cold lines (~30 MiB): runs in temporary files, merged",
        setup: "sh \"$CORPUS/sort-setup.sh\"",
        command: "sh \"$CORPUS/sort-external.sh\"",
        filesystems: &[EXT4_4K, XFS_4K],
        // Written before its first run: a sequential read, large buffered writes of the
        // runs, their reads, the output; no sync: nothing.
        checks: &[],
        ..W
    },
    Workload {
        name: "git-clone",
        about: "git clone --no-hardlinks of this repository: its pack copied, ~700 files out",
        command: "sh \"$CORPUS/git-clone.sh\"",
        filesystems: &[EXT4_4K, XFS_4K],
        // Written before its first run: git fsyncs the pack and its index (a few syncs of
        // large payloads), then checks the files out buffered: nothing.
        checks: &[],
        ..W
    },
    Workload {
        name: "sqlite-vacuum",
        about: "sqlite3 VACUUM of a 40 MiB database with half its rows deleted",
        setup: "sh \"$CORPUS/sqlite-vacuum-setup.sh\"",
        command: "sh \"$CORPUS/sqlite-vacuum.sh\"",
        filesystems: &[EXT4_4K, XFS_4K],
        // Written before its first run: the rebuild goes through the rollback journal with a
        // handful of fsyncs, each of megabytes: nothing.
        checks: &[],
        ..W
    },
    Workload {
        name: "compileall",
        about: "python3 -m compileall of a cold copy of the standard library (~1,000 .pyc)",
        setup: "sh \"$CORPUS/compileall-setup.sh\"",
        command: "sh \"$CORPUS/compileall.sh\"",
        filesystems: &[EXT4_4K, XFS_1K],
        // Written before its first run: small whole-file reads, small buffered writes renamed
        // into place, never synced: nothing.
        checks: &[],
        ..W
    },
];
