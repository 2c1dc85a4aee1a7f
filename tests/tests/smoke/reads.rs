//! The smoke set's `reads` cell: how many times the tool's programs run for one direct read,
//! counted, not timed (a count holds under emulation): issue 27's "programs run per I/O",
//! measured on every kernel of the matrix, trampolines or the raw pair.

use std::{
    fs::OpenOptions,
    os::unix::fs::{FileExt, OpenOptionsExt},
    time::{Duration, Instant, SystemTime},
};

use serde_json::Value;

use super::Cell;

/// How long the loop reads: one or two of the tool's 0.5-s intervals close inside it (a
/// guest under emulation reads 8,000 to 12,000 times a second).
pub const READ_FOR: Duration = Duration::from_millis(1000);

/// Reads `device` (`size` bytes) from its start with 4 KiB `O_DIRECT` preads, one at a
/// time (a database's synchronous reads, fio's psync), for [`READ_FOR`]; returns how many.
pub fn direct_reads(device: &str, size: u64) -> u64 {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(device)
        .unwrap_or_else(|e| panic!("{device}: {e}"));
    // O_DIRECT wants a buffer aligned to the block size.
    let mut bytes = vec![0u8; 8192];
    let start = bytes.as_ptr().align_offset(4096);
    let buffer = &mut bytes[start..start + 4096];
    let began = Instant::now();
    let (mut reads, mut offset) = (0u64, 0u64);
    while began.elapsed() < READ_FOR {
        let n = file
            .read_at(buffer, offset)
            .unwrap_or_else(|e| panic!("{device} at {offset}: {e}"));
        assert_eq!(n, 4096, "{device} at {offset}: a short read");
        reads += 1;
        offset = (offset + 4096) % size;
    }
    reads
}

/// The `reads` cell: the program runs of the intervals that closed while the loop read
/// (`window`), over the device `dev`'s reads in them. At least 3 (creation, issue and
/// completion of every request: the block probes ran for each) and at most 16 (nothing
/// runs away). Where the system-call probes ride trampolines, `pread64` runs none; on the
/// raw pair it runs two, and so does every other system call meanwhile. The rest is the
/// switches in and out of D of the reader and of the loop device's worker.
pub fn reads_cell(
    path: &str,
    timed: &[(SystemTime, Value)],
    window: (SystemTime, SystemTime),
    dev: &str,
) -> Cell {
    let inside: Vec<&Value> = timed
        .iter()
        .filter(|(arrived, _)| *arrived > window.0 && *arrived <= window.1)
        .map(|(_, interval)| interval)
        .collect();
    if inside.is_empty() {
        return Err("no interval closed while the loop read".into());
    }
    if inside.iter().any(|i| i["events"]["bpf_runs"].is_null()) {
        return Err("the kernel kept no BPF statistics for an interval of the loop".into());
    }
    let runs: u64 = inside
        .iter()
        .filter_map(|i| i["events"]["bpf_runs"].as_u64())
        .sum();
    let reads: u64 = inside
        .iter()
        .flat_map(|i| i["disks"].as_array().into_iter().flatten())
        .filter(|d| d["dev"] == dev)
        .filter_map(|d| d["reads"].as_u64())
        .sum();
    if reads == 0 {
        return Err(format!("no read of {dev} in {} intervals", inside.len()));
    }
    #[expect(clippy::cast_precision_loss, reason = "a ratio of counts")]
    let per = runs as f64 / reads as f64;
    let word = path.split([':', ' ']).next().unwrap_or_default();
    let seen = format!("{word}: {reads} direct reads, {runs} program runs ({per:.2} per read)");
    if (3.0..=16.0).contains(&per) {
        Ok(seen)
    } else {
        Err(format!("{seen}: outside 3 to 16"))
    }
}
