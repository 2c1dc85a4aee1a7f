//! Who waits behind whom: a latency-sensitive program beside a bulk writer on one disk, the
//! writer direct or buffered (its bytes then reach the disk as the flushers' write-back), and
//! one beside a writer that does not slow it, which must not be named.

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
        name: "noisy-neighbour-buffered",
        about: "python fsync logger alone 4 s, then beside dd writing 1.5 GiB buffered",
        command: "sh \"$CORPUS/noisy-neighbour-buffered.sh\" 1500",
        filesystems: &[EXT4_4K],
        // Written before its first run (by hand, on a 3 GiB ext4 loop device): every
        // request dd causes is a flusher's, charged to dd as write-back. Once free space
        // runs short ext4 makes every writer wait for that write-back (ext4_nonda_switch):
        // the logger blocks in one write for over a second and finishes no call:
        // noisy_neighbour (a warning: a stall) naming dd. Seen so: "one call blocked 1.77s
        // so far ... dd holds 100% of loop0's busy time (392.2 MiB/s written back)". The
        // logger's write_amplification is true all along (journal-fsync's cell).
        expect: &[&["noisy_neighbour"], &["write_amplification"]],
        tolerate: &["sync_storm", "flush_heavy", "dirty_throttled"],
        file: "system.journal",
        checks: &[],
        size_mib: 3072,
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
