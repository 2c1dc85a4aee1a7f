//! What a process's reads cost the device against what it asked for: its device reads (the
//! readahead ones per file), and from /proc its major faults and the bytes its read calls
//! returned. The read-amplification detector sets one against the other.

use crate::{BlockIo, FastMap, FileKey, Op, ProcDiskTotals, ProcReadTotals, ReadFigures};

/// Files whose readahead bytes are kept per process and period (the most read).
const MAX_FILES: usize = 4;
/// File names remembered (the table starts over when full).
const MAX_NAMES: usize = 4_096;

/// A process's reads over a period.
#[derive(Clone, Debug, Default)]
pub(super) struct ReadPeriod {
    /// Read requests, and those that began where its previous request to the disk ended.
    requests: u64,
    sequential: u64,
    /// Readahead reads (`REQ_RAHEAD`): the page cache reading ahead of what was asked.
    readahead_requests: u64,
    readahead_bytes: u64,
    /// Readahead bytes per file, the most read first.
    files: Vec<(FileKey, u64)>,
    /// From /proc: major and minor faults and read-call bytes in the period, once known.
    major_faults: u64,
    minor_faults: u64,
    read_chars: u64,
    asked_known: bool,
}

impl ReadPeriod {
    pub(super) fn add(&mut self, io: &BlockIo, sequential: bool) {
        if io.op != Op::Read {
            return;
        }
        self.requests += 1;
        self.sequential += u64::from(sequential);
        if !io.is_readahead() {
            return;
        }
        self.readahead_requests += 1;
        let bytes = u64::from(io.bytes);
        self.readahead_bytes = self.readahead_bytes.saturating_add(bytes);
        if let Some(file) = io.file {
            self.add_file(file, bytes);
        }
    }

    fn add_file(&mut self, file: FileKey, bytes: u64) {
        if let Some(entry) = self.files.iter_mut().find(|(f, _)| *f == file) {
            entry.1 = entry.1.saturating_add(bytes);
        } else if self.files.len() < MAX_FILES {
            self.files.push((file, bytes));
        } else if let Some(last) = self.files.last_mut()
            && last.1 < bytes
        {
            // A newcomer replaces the least read only with more bytes than it.
            *last = (file, bytes);
        }
        self.files.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }

    /// Reads the probes summed (aggregation mode; readahead reads are always streamed).
    pub(super) fn add_summed(&mut self, sums: &ProcDiskTotals) {
        self.requests += sums.requests[0];
    }

    pub(super) fn merge(&mut self, other: &Self) {
        self.requests += other.requests;
        self.sequential += other.sequential;
        self.readahead_requests += other.readahead_requests;
        self.readahead_bytes = self.readahead_bytes.saturating_add(other.readahead_bytes);
        for &(file, bytes) in &other.files {
            self.add_file(file, bytes);
        }
        self.major_faults += other.major_faults;
        self.minor_faults += other.minor_faults;
        self.read_chars = self.read_chars.saturating_add(other.read_chars);
        self.asked_known |= other.asked_known;
    }

    pub(super) fn figures(&self, names: &FileNames) -> ReadFigures {
        ReadFigures {
            requests: self.requests,
            sequential: self.sequential,
            readahead_requests: self.readahead_requests,
            readahead_bytes: self.readahead_bytes,
            files: self
                .files
                .iter()
                .map(|(file, bytes)| (names.name(*file), *bytes))
                .collect(),
            major_faults: self.major_faults,
            minor_faults: self.minor_faults,
            read_call_bytes: self.read_chars,
            asked_known: self.asked_known,
        }
    }
}

/// The /proc totals a process had at its previous sample.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AskedBefore {
    major_faults: u64,
    minor_faults: u64,
    read_chars: u64,
}

/// Adds what `now` says the process asked for since `before` to `period`; the first sample of
/// a process that started before the probes only sets where it counts from.
pub(super) fn take_asked(
    before: &mut Option<AskedBefore>,
    now: &ProcReadTotals,
    period: &mut ReadPeriod,
) {
    let from = match *before {
        Some(b) => Some(b),
        None if now.young => Some(AskedBefore::default()),
        None => None,
    };
    if let Some(from) = from {
        period.major_faults += now.major_faults.saturating_sub(from.major_faults);
        period.minor_faults += now.minor_faults.saturating_sub(from.minor_faults);
        period.read_chars = period
            .read_chars
            .saturating_add(now.read_chars.saturating_sub(from.read_chars));
        period.asked_known = true;
    }
    *before = Some(AskedBefore {
        major_faults: now.major_faults,
        minor_faults: now.minor_faults,
        read_chars: now.read_chars,
    });
}

/// The paths of files the kernel named by device and inode, as the feed found them.
#[derive(Debug, Default)]
pub(crate) struct FileNames {
    names: FastMap<FileKey, String>,
}

impl FileNames {
    pub(crate) fn learn(&mut self, names: &[(FileKey, String)]) {
        for (file, path) in names {
            if self.names.len() >= MAX_NAMES && !self.names.contains_key(file) {
                self.names.clear();
            }
            self.names.insert(*file, path.clone());
        }
    }

    /// Its path, else `inode N on M:m`.
    fn name(&self, file: FileKey) -> String {
        self.names
            .get(&file)
            .cloned()
            .unwrap_or_else(|| format!("inode {} on {}", file.ino, file.fs_dev))
    }
}
