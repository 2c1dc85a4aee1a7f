//! The sync part of a process's figures: who wrote for whom, the population of sync calls,
//! the files synced and their cost (moved out of `snapshot.rs` to keep it short).

use super::*;

/// Another process in a charge: who wrote for whom, and how much.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Party {
    pub tgid: u32,
    pub comm: String,
    pub bytes: u64,
}

/// Settled sync calls of one population (see [`SyncFigures`]): how many, what they made
/// durable, and what the device wrote for them.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncPopulation {
    pub calls: u64,
    pub payload_bytes: u64,
    /// The write system calls that made up the payload.
    pub payload_writes: u64,
    /// Cache flushes the calls issued, or a kernel thread issued for them.
    pub flushes: u64,
    /// Device writes the calls' threads made themselves, including `ahead_bytes`.
    pub own_bytes: u64,
    /// Of `own_bytes`, those the process's `sync_file_range` calls wrote out of the same
    /// files before the calls (dpkg, git's batch mode): the data the calls made durable.
    pub ahead_bytes: u64,
    pub charged_bytes: u64,
    pub min_payload: u64,
    pub max_payload: u64,
    /// Block size of the filesystem synced (the last known).
    pub fs_block_size: u32,
}

impl SyncPopulation {
    /// Device bytes per payload byte over the population; `None` without payload.
    pub fn amplification(&self) -> Option<f64> {
        #[expect(clippy::cast_precision_loss, reason = "a display ratio")]
        let ratio = (self.own_bytes + self.charged_bytes) as f64 / self.payload_bytes as f64;
        (self.payload_bytes > 0).then_some(ratio)
    }

    pub fn mean_payload(&self) -> u64 {
        self.payload_bytes.checked_div(self.calls).unwrap_or(0)
    }

    /// The mean write system call of the payload (0 without one).
    pub fn mean_write(&self) -> u64 {
        self.payload_bytes
            .checked_div(self.payload_writes)
            .unwrap_or(0)
    }

    pub fn mean_own(&self) -> u64 {
        self.own_bytes.checked_div(self.calls).unwrap_or(0)
    }

    pub fn mean_charged(&self) -> u64 {
        self.charged_bytes.checked_div(self.calls).unwrap_or(0)
    }
}

/// The files some sync calls synced, bounded: the most synced, how many calls went to
/// others, and the latest.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncedFiles {
    /// (path, calls), most synced first.
    pub top: Vec<(String, u64)>,
    /// Calls on files beyond `top` (0: those are all of them).
    pub elsewhere: u64,
    /// The files of the latest calls, two at most, distinct, newest first.
    pub recent: Vec<String>,
}

/// A process's sync calls over some period.
///
/// Each call's cost is settled on its own (its payload, its own device writes, the journal
/// writes charged to it) and the calls are split into two populations: **small** calls made
/// less than one filesystem block durable (each still writes at least a whole block), the
/// others are **large**. Cost figures count settled calls, which lag the calls by up to
/// [`crate::SETTLE_NS`].
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SyncFigures {
    /// Calls that made data durable.
    pub syncs: u64,
    /// `sync_file_range` calls that only started write-back (no wait flag): not syncs.
    pub writeback_starts: u64,
    /// Calls that returned an error.
    pub errors: u64,
    pub latency: Latency,
    pub hist: Log2Hist,
    /// Time spent in the period's calls, summed over threads (the latency histogram's sum).
    pub time_ns: u64,
    /// Of the calls settled in the period: time spent in them (summed over threads), their
    /// payloads, and the stretch from the first's start to the last's end (the time the
    /// process spent syncing).
    pub settled_time_ns: u64,
    pub settled_payload: Histogram,
    pub settled_span_ns: u64,
    /// Bytes (and write calls) written to the synced fds since their previous syncs.
    pub window_bytes: u64,
    pub window_writes: u64,
    /// The most frequent kind of call (`fsync`, `fdatasync`, `O_DSYNC write`, ...): of the
    /// period's calls, else of those settled in it.
    #[serde(deserialize_with = "crate::labels::one")]
    pub kind: crate::labels::Label,
    /// Calls per kind, in the kinds' order.
    #[serde(deserialize_with = "crate::labels::pairs")]
    pub kinds: Vec<(crate::labels::Label, u64)>,
    /// The most synced files: (path, calls), most first.
    pub files: Vec<(String, u64)>,
    /// Calls on files beyond `files` (0: those are all of them).
    pub files_elsewhere: u64,
    /// The files of the latest calls, two at most, distinct, newest first.
    pub files_recent: Vec<String>,
    /// The files of the calls settled in the period (judged ones: not `sync_file_range`):
    /// what a finding judged on settled calls names.
    pub settled_files: SyncedFiles,
    /// The files of the small settled calls, most first.
    pub small_files: Vec<(String, u64)>,
    /// Small settled calls on files beyond `small_files` (0: those are all of them).
    pub small_files_elsewhere: u64,
    /// The files of the latest small settled calls, two at most, distinct, newest first.
    pub small_files_recent: Vec<String>,
    /// The disk of the most synced files.
    pub disk: Option<Dev>,
    /// Block size of the synced files' filesystem (0 when unknown).
    pub fs_block_size: u32,
    pub small: SyncPopulation,
    pub large: SyncPopulation,
    /// Settled calls whose payload is not measured (io_uring): what they wrote themselves
    /// and what was charged to them (their payload figures are 0).
    pub unmeasured: SyncPopulation,
    /// Settled fsyncs of directories: the new files' names made durable.
    pub dirs: SyncPopulation,
    /// Settled calls with nothing to make durable.
    pub empty: u64,
    /// Cache flushes the empty calls cost anyway (a clean file's fsync still flushes).
    pub empty_flushes: u64,
    /// Settled calls judged with the commit before them: a commit record made durable right
    /// after the data it points at (LMDB's meta page, bbolt's), in the large population.
    #[serde(default)]
    pub commit_records: u64,
    /// Small settled calls whose payload the thread wrote by direct I/O just before (a log
    /// block, then fdatasync): their device writes are those direct writes.
    #[serde(default)]
    pub direct_pairs: u64,
    /// The files of the empty calls, most first.
    pub empty_files: Vec<(String, u64)>,
    /// Bytes of write requests the process created while inside its sync calls.
    pub in_sync_write_bytes: u64,
    /// Bytes kernel threads (journal, write-back) wrote while its sync calls waited.
    pub charged_write_bytes: u64,
    /// Who wrote those bytes.
    pub charged_from: Vec<Party>,
    /// For a kernel thread: whom it wrote for.
    pub on_behalf_of: Vec<Party>,
}

impl SyncFigures {
    /// The population with more calls (small on a tie): the process's typical sync.
    pub fn typical(&self) -> &SyncPopulation {
        if self.large.calls > self.small.calls {
            &self.large
        } else {
            &self.small
        }
    }

    /// Whether its typical kind of sync is a write that made itself durable (`O_DSYNC write`).
    pub fn kind_is_write(&self) -> bool {
        crate::SyncKind::ALL
            .iter()
            .any(|k| k.is_write() && k.name() == self.kind)
    }

    /// Write amplification of the process's sync calls: device bytes per byte made durable
    /// (own writes plus charged journal writes, over payload) of its **typical** sync call,
    /// with its share of the directory fsyncs that made the files' names durable (a maildir
    /// delivery is the message's fsync and its directory's: on btrfs the second costs as
    /// much as the first). The `AMP` column, the JSON `write_amplification` and the
    /// `write_amplification` finding all use this one definition. `None` before any call
    /// with a payload was settled.
    #[expect(clippy::cast_precision_loss, reason = "a display ratio")]
    pub fn amplification(&self) -> Option<f64> {
        let typical = self.typical();
        let files = self.small.calls + self.large.calls;
        if typical.payload_bytes == 0 || files == 0 {
            return None;
        }
        let dirs = (self.dirs.own_bytes + self.dirs.charged_bytes) as f64 * typical.calls as f64
            / files as f64;
        Some(
            ((typical.own_bytes + typical.charged_bytes) as f64 + dirs)
                / typical.payload_bytes as f64,
        )
    }
}
