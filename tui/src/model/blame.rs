//! Journal blame: charging the writes of kernel threads (jbd2, kworkers) to the sync callers
//! that were waiting for them.
//!
//! The rule: a write request submitted by a kernel thread to disk D is charged to every sync
//! call that was in progress when the request was created (`start <= created <= end`), whose
//! file lives on D (or whose disk is unknown, or that syncs everything: sync, syncfs on an
//! unknown disk), and that can wait for a journal commit (not sync_file_range). When several
//! calls overlap (group commit, several threads or processes), the bytes are split evenly.
//!
//! Limits, documented in the README: background write-back that happens to overlap a sync is
//! charged too; a commit that a sync waits for but that began before the sync is not; a
//! write is settled `GRACE_NS` (300 ms) after it completed, so a sync still running that much
//! later misses it; charges land in the interval in which they are settled, at most one
//! interval late.

use std::collections::{BTreeMap, VecDeque};

use super::{BlockIo, Comm, Dev, Op, SyncCall};

/// How long a kernel-thread write waits for the sync calls it may belong to: a sync that
/// waited for a journal write returns right after it completes (a flush at most later), and
/// its record reaches the model within the reader's 50 ms drain period.
pub const GRACE_NS: u64 = 300_000_000;
/// Sync calls are remembered this long after they end.
const KEEP_SYNCS_NS: u64 = 10_000_000_000;
/// Bound on remembered items, so a storm cannot grow the model without limit.
const MAX_PENDING: usize = 200_000;

#[derive(Clone, Debug)]
struct PendingWrite {
    tgid: u32,
    comm: Comm,
    dev: Dev,
    created_ns: u64,
    completed_ns: u64,
    bytes: u64,
}

#[derive(Clone, Debug)]
struct Window {
    tgid: u32,
    comm: Comm,
    dev: Option<Dev>,
    start_ns: u64,
    end_ns: u64,
}

/// `bytes` written by kernel thread `from` on behalf of process `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    pub from_tgid: u32,
    pub from_comm: Comm,
    pub to_tgid: u32,
    pub to_comm: Comm,
    pub bytes: u64,
}

#[derive(Debug, Default)]
pub struct Blame {
    pending: VecDeque<PendingWrite>,
    syncs: VecDeque<Window>,
}

impl Blame {
    pub fn note_write(&mut self, io: &BlockIo) {
        if !io.kernel_thread || io.op != Op::Write || io.bytes == 0 {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back(PendingWrite {
            tgid: io.tgid,
            comm: io.comm,
            dev: io.dev,
            created_ns: io.created_ns,
            completed_ns: io.completed_ns,
            bytes: u64::from(io.bytes),
        });
    }

    pub fn note_sync(&mut self, call: &SyncCall) {
        if !call.kind.commits_journal() {
            return;
        }
        if self.syncs.len() >= MAX_PENDING {
            self.syncs.pop_front();
        }
        self.syncs.push_back(Window {
            tgid: call.tgid,
            comm: call.comm,
            dev: call.dev,
            start_ns: call.start_ns,
            end_ns: call.end_ns,
        });
    }

    /// Charges every write that completed at least `GRACE_NS` before `now_ns` (every write
    /// when `all`), and forgets old sync calls.
    pub fn settle(&mut self, now_ns: u64, all: bool) -> Vec<Charge> {
        let mut charges: BTreeMap<(u32, u32), Charge> = BTreeMap::new();
        let mut keep = VecDeque::with_capacity(self.pending.len());
        for write in self.pending.drain(..) {
            if !all && write.completed_ns.saturating_add(GRACE_NS) > now_ns {
                keep.push_back(write);
                continue;
            }
            let waiting: Vec<&Window> = self
                .syncs
                .iter()
                .filter(|s| s.start_ns <= write.created_ns && write.created_ns <= s.end_ns)
                .filter(|s| s.dev.is_none_or(|dev| dev == write.dev))
                .filter(|s| s.tgid != write.tgid)
                .collect();
            let Some(n) = u64::try_from(waiting.len()).ok().filter(|&n| n > 0) else {
                continue;
            };
            for (i, sync) in waiting.iter().enumerate() {
                // Even split; the first caller takes the remainder so bytes add up.
                let share = write.bytes / n + if i == 0 { write.bytes % n } else { 0 };
                charges
                    .entry((write.tgid, sync.tgid))
                    .or_insert_with(|| Charge {
                        from_tgid: write.tgid,
                        from_comm: write.comm,
                        to_tgid: sync.tgid,
                        to_comm: sync.comm,
                        bytes: 0,
                    })
                    .bytes += share;
            }
        }
        self.pending = keep;
        let horizon = now_ns.saturating_sub(KEEP_SYNCS_NS);
        self.syncs.retain(|s| s.end_ns >= horizon);
        charges.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FileRef, SyncKind};

    const MS: u64 = 1_000_000;
    const LOOP0: Dev = Dev::new(7, 0);

    fn journal_write(at_ms: u64, bytes: u32) -> BlockIo {
        BlockIo {
            dev: LOOP0,
            sector: 0,
            bytes,
            op: Op::Write,
            flags: 0,
            tgid: 300,
            pid: 300,
            comm: Comm::new("jbd2/loop0-8"),
            created_ns: at_ms * MS,
            issued_ns: at_ms * MS,
            completed_ns: at_ms * MS + MS,
            error: 0,
            kernel_thread: true,
        }
    }

    fn fsync(tgid: u32, from_ms: u64, to_ms: u64, dev: Option<Dev>) -> SyncCall {
        SyncCall {
            tgid,
            pid: tgid,
            comm: Comm::new("lab001"),
            kind: SyncKind::Fsync,
            fd: Some(3),
            start_ns: from_ms * MS,
            end_ns: to_ms * MS,
            ret: 0,
            window_bytes: 128,
            window_writes: 1,
            file: FileRef::Path("/data/log".into()),
            dev,
        }
    }

    #[test]
    fn a_journal_write_during_one_fsync_is_charged_to_its_caller() {
        let mut blame = Blame::default();
        blame.note_write(&journal_write(10, 8192));
        blame.note_sync(&fsync(42, 5, 20, Some(LOOP0)));
        assert!(
            blame.settle(200 * MS, false).is_empty(),
            "still within the grace period"
        );
        let charges = blame.settle(2_000 * MS, false);
        assert_eq!(charges.len(), 1);
        assert_eq!(
            (charges[0].from_tgid, charges[0].to_tgid, charges[0].bytes),
            (300, 42, 8192)
        );
        assert!(blame.settle(3_000 * MS, false).is_empty(), "charged once");
    }

    #[test]
    fn group_commit_splits_the_bytes() {
        let mut blame = Blame::default();
        blame.note_write(&journal_write(10, 12_289));
        blame.note_sync(&fsync(1, 5, 20, Some(LOOP0)));
        blame.note_sync(&fsync(2, 8, 30, None));
        blame.note_sync(&fsync(3, 9, 15, Some(LOOP0)));
        let charges = blame.settle(0, true);
        let total: u64 = charges.iter().map(|c| c.bytes).sum();
        assert_eq!(total, 12_289, "nothing lost to rounding");
        assert_eq!(charges.len(), 3);
        assert!(charges.iter().all(|c| c.bytes >= 4_096));
    }

    #[test]
    fn other_disks_other_times_and_data_only_syncs_are_not_charged() {
        let mut blame = Blame::default();
        blame.note_write(&journal_write(10, 4096));
        blame.note_sync(&fsync(1, 11, 20, Some(LOOP0))); // began after the write was created
        blame.note_sync(&fsync(2, 5, 20, Some(Dev::new(8, 0)))); // another disk
        let mut range = fsync(3, 5, 20, Some(LOOP0));
        range.kind = SyncKind::SyncFileRange;
        blame.note_sync(&range);
        let mut user_write = journal_write(10, 4096);
        user_write.kernel_thread = false;
        blame.note_write(&user_write);
        assert!(blame.settle(0, true).is_empty());
    }
}
