//! Who waits behind whom: a latency-sensitive program beside a bulk writer on one disk, and
//! one beside a buffered writer (its bytes reach the disk as the flushers' write-back) that
//! does not slow it, which must not be named. The buffered writer that does (the logger
//! stalled behind write-back on a fuller disk) is not here: whether the stall comes depends
//! on the host's dirty memory when it runs (docs/findings.md).

use super::corpus::W;
use super::*;

pub const NEIGHBOURS: &[Workload] = &[
    Workload {
        name: "noisy-neighbour",
        about: "python fsync logger alone 3 s, then beside fio 1 MiB O_DIRECT writes, QD 16",
        command: "sh \"$CORPUS/noisy-neighbour.sh\"",
        filesystems: &[EXT4_4K, XFS_4K],
        // Written before its first run: the logger alone syncs in ~0.3-0.5 ms; once fio
        // fills the disk's queue its syncs wait behind 1 MiB writes (~10 ms): noisy_neighbour
        // naming the logger as the one who waits, behind fio. The logger's own
        // write_amplification is true all along (journal-fsync's cell).
        expect: &[&["noisy_neighbour"], &["write_amplification"]],
        tolerate: &["sync_storm", "flush_heavy"],
        file: "system.journal",
        checks: &[],
        ..W
    },
    Workload {
        name: "noisy-neighbour-buffered-mild",
        about: "python fsync logger alone 4 s, then beside dd writing 700 MiB buffered",
        command: "sh \"$CORPUS/noisy-neighbour-buffered.sh\" 700",
        filesystems: &[EXT4_4K],
        // Expected noisy_neighbour at its first run, on the 1 GiB filesystem; wrong: the
        // logger's sync p50 went from 150-170 us to 62-66 us while dd's pages were written
        // back (the kernel's write-back throttling kept its queue short) and its one wait
        // for write-back lasted 124 ms. A neighbour that does not slow the victim is not
        // named: only the logger's own finding.
        expect: &[&["write_amplification"]],
        tolerate: &["sync_storm", "flush_heavy", "dirty_throttled"],
        file: "system.journal",
        checks: &[],
        ..W
    },
];
