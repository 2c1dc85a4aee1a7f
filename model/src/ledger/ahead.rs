//! What `sync_file_range` wrote out of each file, per process, until a committing sync makes
//! it durable: that file's next fsync (dpkg: write each file, start its write-back, fsync it
//! later), or a commit that makes nothing of its own durable and so flushes them all (git's
//! batch mode: one fsync of an empty marker file after 200 write-outs).

use std::collections::VecDeque;

use super::super::{Dev, FastMap};

/// Files waiting, over all processes, and for how long: an installer starts the write-back
/// of every file of a package, then fsyncs them one by one.
pub(super) const MAX_FILES: usize = 16_384;
pub(super) const EXPIRE_NS: u64 = 60_000_000_000;

/// A file of a process, as the kernel named it during a call: (tgid, filesystem, inode).
pub(super) type FileKey = (u32, Dev, u64);

#[derive(Clone, Copy, Debug)]
struct WrittenOut {
    bytes: u64,
    last_ns: u64,
}

#[derive(Debug, Default)]
struct ProcessFiles {
    files: FastMap<(Dev, u64), WrittenOut>,
}

#[derive(Debug, Default)]
pub(super) struct WrittenAhead {
    by_process: FastMap<u32, ProcessFiles>,
    /// Files in `by_process`, over all processes.
    files: usize,
    /// Files in the order they were first written out, for eviction (those taken since are
    /// stale here and skipped).
    order: VecDeque<FileKey>,
}

impl WrittenAhead {
    /// `bytes` of the file `key` were written out at `at_ns`.
    pub(super) fn add(&mut self, key: FileKey, bytes: u64, at_ns: u64) {
        let (tgid, dev, ino) = key;
        let known = self
            .by_process
            .get(&tgid)
            .is_some_and(|p| p.files.contains_key(&(dev, ino)));
        if !known {
            // The file first written out longest ago makes room.
            while self.files >= MAX_FILES
                && let Some(oldest) = self.order.pop_front()
            {
                self.take_file(oldest);
            }
            if self.order.len() >= 2 * MAX_FILES {
                let live = &self.by_process;
                self.order.retain(|(t, d, i)| {
                    live.get(t).is_some_and(|p| p.files.contains_key(&(*d, *i)))
                });
            }
            self.order.push_back(key);
            self.files += 1;
        }
        let entry = self
            .by_process
            .entry(tgid)
            .or_default()
            .files
            .entry((dev, ino))
            .or_insert(WrittenOut {
                bytes: 0,
                last_ns: 0,
            });
        entry.bytes = entry.bytes.saturating_add(bytes);
        entry.last_ns = entry.last_ns.max(at_ns);
    }

    /// What was written out of one file, taken.
    pub(super) fn take_file(&mut self, (tgid, dev, ino): FileKey) -> u64 {
        let Some(process) = self.by_process.get_mut(&tgid) else {
            return 0;
        };
        let Some(out) = process.files.remove(&(dev, ino)) else {
            return 0;
        };
        self.files -= 1;
        if process.files.is_empty() {
            self.by_process.remove(&tgid);
        }
        out.bytes
    }

    /// What was written out of every file of a process, taken.
    pub(super) fn take_process(&mut self, tgid: u32) -> u64 {
        let Some(process) = self.by_process.remove(&tgid) else {
            return 0;
        };
        self.files -= process.files.len();
        process.files.values().map(|o| o.bytes).sum()
    }

    /// Forgets files written out before `horizon_ns` (never synced: git's writeout-only mode).
    pub(super) fn expire(&mut self, horizon_ns: u64) {
        let mut files = 0;
        self.by_process.retain(|_, p| {
            p.files.retain(|_, o| o.last_ns >= horizon_ns);
            files += p.files.len();
            !p.files.is_empty()
        });
        self.files = files;
        if files == 0 {
            self.order.clear();
        }
    }

    #[cfg(test)]
    pub(super) fn files(&self) -> usize {
        self.files
    }

    #[cfg(test)]
    pub(super) fn order_len(&self) -> usize {
        self.order.len()
    }

    #[cfg(test)]
    pub(super) fn has(&self, (tgid, dev, ino): FileKey) -> bool {
        self.by_process
            .get(&tgid)
            .is_some_and(|p| p.files.contains_key(&(dev, ino)))
    }
}
