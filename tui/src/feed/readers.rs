//! What the processes that read from a disk asked for, from /proc, and the paths of the files
//! readahead read for them: set against their device reads by the read-amplification
//! detector. Read once per interval, for the processes that read in it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
};

use super::procfs::{self, ProcCache};
use crate::model::{BlockIo, FileKey, Op, ProcDiskTotals, ProcReadTotals};

/// Processes and files looked up per interval at most (the rest wait for the next).
const MAX_PER_INTERVAL: usize = 1_024;
/// A reader's totals are read again at most this often while its requests come: a reader
/// that exits before the interval ends keeps the totals read last (its final ones are gone
/// with it).
const REFRESH_NS: u64 = 100_000_000;

#[derive(Default)]
pub struct Readers {
    /// Processes with read requests since the last sample, and their totals as last read
    /// (and when).
    tgids: BTreeMap<u32, Option<(ProcReadTotals, u64)>>,
    /// Files readahead read since the last sample, with a process that read them.
    files: BTreeSet<(FileKey, u32)>,
    /// This process's start time (clock ticks after boot): a reader that started after it
    /// counts from zero.
    started: Option<u64>,
}

impl Readers {
    pub fn saw(&mut self, io: &BlockIo, now_ns: u64) {
        if io.op != Op::Read || io.kernel_thread {
            return;
        }
        let started = self.started();
        if self.tgids.len() < MAX_PER_INTERVAL || self.tgids.contains_key(&io.tgid) {
            let last = self.tgids.entry(io.tgid).or_default();
            if last.is_none_or(|(_, at)| now_ns.saturating_sub(at) >= REFRESH_NS)
                && let Some(totals) = read_totals(io.tgid, started)
            {
                *last = Some((totals, now_ns));
            }
        }
        if let Some(file) = io.file
            && self.files.len() < MAX_PER_INTERVAL
        {
            self.files.insert((file, io.tgid));
        }
    }

    /// This process's start time, read once.
    fn started(&mut self) -> u64 {
        *self.started.get_or_insert_with(|| {
            fs::read_to_string("/proc/self/stat")
                .ok()
                .and_then(|s| procfs::stat_field(&s, 22)?.parse().ok())
                .unwrap_or(u64::MAX)
        })
    }

    /// What the readers of the interval asked for, and the paths of the files read ahead.
    pub fn sample(
        &mut self,
        summed: &[ProcDiskTotals],
        procs: &mut ProcCache,
    ) -> (Vec<ProcReadTotals>, Vec<(FileKey, String)>) {
        let started = self.started();
        for sums in summed.iter().filter(|s| s.requests[0] > 0) {
            if self.tgids.len() < MAX_PER_INTERVAL {
                self.tgids.entry(sums.tgid).or_default();
            }
        }
        let totals = std::mem::take(&mut self.tgids)
            .into_iter()
            .filter_map(|(tgid, last)| {
                read_totals(tgid, started).or_else(|| last.map(|(totals, _)| totals))
            })
            .collect();
        let mut names: Vec<(FileKey, String)> = Vec::new();
        for (file, tgid) in std::mem::take(&mut self.files) {
            if names.iter().any(|(f, _)| *f == file) {
                continue;
            }
            let path = procfs_path(procs, tgid, file);
            if let Some(path) = path {
                names.push((file, path));
            }
        }
        (totals, names)
    }
}

/// The path of `file`: among `tgid`'s open fds, its mappings, or as some process had it open.
fn procfs_path(procs: &mut ProcCache, tgid: u32, file: FileKey) -> Option<String> {
    procs
        .path_of_inode(file.fs_dev, file.ino)
        .or_else(|| {
            fs::read_to_string(format!("/proc/{tgid}/maps"))
                .ok()
                .and_then(|maps| procfs::mapped_path(&maps, file.fs_dev, file.ino))
        })
        .or_else(|| procs.file_of_inode(tgid, file.fs_dev, file.ino))
        .inspect(|path| procs.remember_inode_path(file.fs_dev, file.ino, path))
}

/// `/proc/PID/stat`'s faults and start time, `/proc/PID/io`'s `rchar`.
fn read_totals(tgid: u32, started: u64) -> Option<ProcReadTotals> {
    let stat = fs::read_to_string(format!("/proc/{tgid}/stat")).ok()?;
    let minor_faults = procfs::stat_field(&stat, 10)?.parse().ok()?;
    let major_faults = procfs::stat_field(&stat, 12)?.parse().ok()?;
    let start: u64 = procfs::stat_field(&stat, 22)?.parse().ok()?;
    let io = fs::read_to_string(format!("/proc/{tgid}/io")).ok()?;
    let read_chars = io
        .lines()
        .find_map(|l| l.strip_prefix("rchar:"))?
        .trim()
        .parse()
        .ok()?;
    Some(ProcReadTotals {
        tgid,
        major_faults,
        minor_faults,
        read_chars,
        young: start >= started,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_totals_are_read() {
        let me = std::process::id();
        let totals = read_totals(me, 0).unwrap();
        assert_eq!(totals.tgid, me);
        assert!(totals.read_chars > 0, "{totals:?}");
        assert!(totals.young, "started after boot");
        assert!(!read_totals(me, u64::MAX).unwrap().young);
        assert_eq!(read_totals(u32::MAX, 0), None);
    }
}
