//! What each sync call cost: the payload it made durable, the device writes it issued itself,
//! and the journal and flush writes kernel threads issued while it waited.
//!
//! - **Own writes**: the write requests a thread created while the probes saw it inside a
//!   sync call (`FLAG_IN_SYNC`) belong to the call of that thread whose time they were created
//!   in (a thread is in one system call at a time), matched by time, not by arrival. A call
//!   that waits for its writes (fsync, an `O_DSYNC` write) has them before its record comes:
//!   the record claims them at once, so a thread keeps only its call in progress's writes
//!   waiting, however fast it syncs and however late its calls settle. A write whose record
//!   comes after its call's (`sync_file_range(SYNC_FILE_RANGE_WRITE)` returns before its
//!   writes complete, so they complete after the thread's next call, maybe) is added to that
//!   call, found by time among the thread's calls not yet settled.
//! - **Charged writes**: a write request of a kernel thread (jbd2, a kworker) to disk D is
//!   charged to every journal-committing sync call (not `sync_file_range`) that was in
//!   progress when the request was created, on a file on D (or on an unknown disk), split
//!   evenly when several calls overlap (group commit). A write is settled [`GRACE_NS`] after
//!   it completed, so the records of calls still in progress then have arrived.
//! - A call is settled [`SETTLE_NS`] after it ended, once every write that could be charged to
//!   it has been: its [`SettledSync`] carries the whole cost of that one call.
//!
//! Limits (docs/sync.md): background write-back that overlaps a sync is charged to it; a commit
//! that began before the sync is not; a write completing more than `GRACE_NS` after a call
//! ended reaches the callers' totals but not the call's own cost.
//!
//! Time is the model's: writes and calls carry kernel timestamps, settling happens at the
//! samples' `now_ns`, so a replay settles exactly as the live run did.

use super::FastMap;
use std::collections::VecDeque;

use super::{BlockIo, Comm, Dev, Op, SyncCall};

/// How long a kernel-thread write waits for the sync calls it may belong to: a call that
/// waited for it returns right after it completes, and its record reaches the model within
/// the reader's drain period.
pub const GRACE_NS: u64 = 300_000_000;
/// How long after it ended a sync call is settled.
pub const SETTLE_NS: u64 = 2 * GRACE_NS;
/// Bounds on what waits, so a storm cannot grow the model without limit (the oldest go).
const MAX_PENDING_WRITES: usize = 200_000;
const MAX_OPEN_SYNCS: usize = 100_000;
const MAX_THREADS_WITH_OWN_WRITES: usize = 16_384;
/// Own writes of a thread whose sync record never came (dropped) are forgotten after this.
const OWN_WRITES_EXPIRE_NS: u64 = 10_000_000_000;
/// Counterparties kept per sync call.
const MAX_CHARGED_BY: usize = 4;

#[derive(Clone, Debug)]
struct PendingWrite {
    tgid: u32,
    comm: Comm,
    dev: Dev,
    created_ns: u64,
    completed_ns: u64,
    bytes: u64,
    /// A cache flush (no data).
    flush: bool,
}

/// One write (or cache flush: no bytes) a thread created inside a sync call.
#[derive(Clone, Copy, Debug)]
struct OwnWrite {
    created_ns: u64,
    bytes: u64,
    flushes: u64,
}

/// What one call of a thread wrote itself so far (it waits to be settled).
#[derive(Clone, Copy, Debug)]
struct CallOwn {
    start_ns: u64,
    end_ns: u64,
    bytes: u64,
    flushes: u64,
}

/// A thread's own writes: those of its call in progress, not yet claimed by its record, and
/// what each of its calls noted but not settled wrote itself.
#[derive(Clone, Debug, Default)]
struct OwnWrites {
    /// Writes whose call's record has not come yet, in the order they completed.
    writes: VecDeque<OwnWrite>,
    /// Its calls noted and not settled, by start (a thread's calls do not overlap).
    calls: VecDeque<CallOwn>,
    /// The latest write created or call ended: a thread idle for long is forgotten.
    last_ns: u64,
}

/// Writes of a call in progress kept per thread; beyond, they are summed into the last
/// entry (the same call: a storm of requests inside one long call).
const MAX_OWN_WRITES_PER_THREAD: usize = 4_096;

impl OwnWrites {
    /// The call of this thread that `created_ns` falls in, among those noted.
    fn call_at(&mut self, created_ns: u64) -> Option<&mut CallOwn> {
        self.calls
            .iter_mut()
            .rev()
            .take_while(|c| c.end_ns >= created_ns)
            .find(|c| c.start_ns <= created_ns)
    }

    fn add(&mut self, write: OwnWrite) {
        if let Some(call) = self.call_at(write.created_ns) {
            // Its call has ended already (a write-back the call did not wait for).
            call.bytes = call.bytes.saturating_add(write.bytes);
            call.flushes += write.flushes;
            return;
        }
        let full = self.writes.len() >= MAX_OWN_WRITES_PER_THREAD;
        match self.writes.back_mut() {
            Some(last) if full => {
                last.created_ns = last.created_ns.max(write.created_ns);
                last.bytes = last.bytes.saturating_add(write.bytes);
                last.flushes += write.flushes;
            }
            _ => self.writes.push_back(write),
        }
    }

    /// A call's record came: it takes the waiting writes created during it. Writes created
    /// before it began belong to no call still to come (the thread's earlier calls' records
    /// came before this one's): their call's record was lost, they go.
    fn note_call(&mut self, call: &SyncCall) {
        let mut own = CallOwn {
            start_ns: call.start_ns,
            end_ns: call.end_ns,
            bytes: 0,
            flushes: 0,
        };
        self.writes.retain(|w| {
            let mine = (call.start_ns..=call.end_ns).contains(&w.created_ns);
            if mine {
                own.bytes = own.bytes.saturating_add(w.bytes);
                own.flushes += w.flushes;
            }
            !mine && w.created_ns > call.end_ns
        });
        if self.calls.len() >= MAX_OPEN_SYNCS {
            self.calls.pop_front();
        }
        let at = self.calls.partition_point(|c| c.start_ns <= call.start_ns);
        self.calls.insert(at, own);
        self.last_ns = self.last_ns.max(call.end_ns);
    }

    /// What `call` wrote itself, taken out; calls before it that were never settled (dropped
    /// from the open calls) go with it.
    fn settle(&mut self, call: &SyncCall) -> (u64, u64) {
        let matches = |c: &CallOwn| c.start_ns == call.start_ns && c.end_ns == call.end_ns;
        while self
            .calls
            .front()
            .is_some_and(|c| c.end_ns < call.end_ns && !matches(c))
        {
            self.calls.pop_front();
        }
        self.calls
            .iter()
            .position(matches)
            .and_then(|i| self.calls.remove(i))
            .map_or((0, 0), |c| (c.bytes, c.flushes))
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.calls.is_empty()
    }
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

/// One sync call with everything it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct SettledSync {
    pub call: SyncCall,
    /// Bytes of write requests the calling thread created inside the call.
    pub own_bytes: u64,
    /// Cache flushes the calling thread issued inside the call (the flush a clean file's
    /// fsync still costs is one).
    pub own_flushes: u64,
    /// Bytes of kernel-thread writes charged to the call (its share under group commit).
    pub charged_bytes: u64,
    /// Kernel-thread cache flushes charged to it (one per flush, to the first of the calls
    /// it served).
    pub charged_flushes: u64,
    /// Who wrote the charged bytes: (tgid, comm, bytes), biggest first.
    pub charged_by: Vec<(u32, Comm, u64)>,
}

#[cfg(test)]
impl SettledSync {
    /// Device bytes the call caused.
    pub fn device_bytes(&self) -> u64 {
        self.own_bytes.saturating_add(self.charged_bytes)
    }
}

#[derive(Debug, Default)]
pub struct SyncLedger {
    own: FastMap<u32, OwnWrites>,
    pending: VecDeque<PendingWrite>,
    /// Calls waiting to be settled, sorted by start.
    open: Vec<SettledSync>,
    /// The longest call seen: how far back from a write's creation an open call may start.
    longest_ns: u64,
}

impl SyncLedger {
    pub fn note_write(&mut self, io: &BlockIo) {
        let flush = io.process_op() == Op::Flush;
        if io.op != Op::Write && !flush {
            return;
        }
        // Write-back of a process's dirty pages is that process's, not a journal commit.
        if io.kernel_thread && io.dirtier.is_none() {
            if self.pending.len() >= MAX_PENDING_WRITES {
                self.pending.pop_front();
            }
            self.pending.push_back(PendingWrite {
                tgid: io.tgid,
                comm: io.comm,
                dev: io.dev,
                created_ns: io.created_ns,
                completed_ns: io.completed_ns,
                bytes: if flush { 0 } else { u64::from(io.bytes) },
                flush,
            });
        } else if io.in_sync()
            && let Some(own) = self.thread(io.tid, io.created_ns)
        {
            own.add(OwnWrite {
                created_ns: io.created_ns,
                bytes: if flush { 0 } else { u64::from(io.bytes) },
                flushes: u64::from(flush),
            });
            own.last_ns = own.last_ns.max(io.created_ns);
        }
    }

    /// The own writes of thread `tid`, made room for; `None` when every slot is taken by a
    /// thread active in the last [`OWN_WRITES_EXPIRE_NS`] before `now_ns`.
    fn thread(&mut self, tid: u32, now_ns: u64) -> Option<&mut OwnWrites> {
        if self.own.len() >= MAX_THREADS_WITH_OWN_WRITES && !self.own.contains_key(&tid) {
            let horizon = now_ns.saturating_sub(OWN_WRITES_EXPIRE_NS);
            self.own.retain(|_, w| w.last_ns >= horizon);
            if self.own.len() >= MAX_THREADS_WITH_OWN_WRITES {
                return None;
            }
        }
        Some(self.own.entry(tid).or_default())
    }

    /// A sync call ended: it takes the own writes that came before it and waits for any
    /// later ones and for its charges.
    pub fn note_sync(&mut self, call: &SyncCall) {
        let own_bytes = 0;
        if let Some(own) = self.thread(call.tid, call.end_ns) {
            own.note_call(call);
        }
        if self.open.len() >= MAX_OPEN_SYNCS {
            self.open.remove(0);
        }
        self.longest_ns = self.longest_ns.max(call.latency_ns());
        let at = self
            .open
            .partition_point(|s| s.call.start_ns <= call.start_ns);
        self.open.insert(
            at,
            SettledSync {
                call: call.clone(),
                own_bytes,
                own_flushes: 0,
                charged_bytes: 0,
                charged_flushes: 0,
                charged_by: Vec::new(),
            },
        );
    }

    /// Whether a call of `tgid` is still waiting to be settled.
    #[cfg(test)]
    pub fn has_open(&self, tgid: u32) -> bool {
        self.open.iter().any(|s| s.call.tgid == tgid)
    }

    /// The processes with a call not yet settled: one pass, for asking about thousands of
    /// processes at a close.
    pub fn with_open_calls(&self) -> std::collections::HashSet<u32, foldhash::fast::RandomState> {
        self.open.iter().map(|s| s.call.tgid).collect()
    }

    /// Settles the writes that completed at least [`GRACE_NS`] before `now_ns` and the calls
    /// that ended at least [`SETTLE_NS`] before it (everything when `all`). Returns the
    /// settled calls (oldest first) and the charges per (writer, caller).
    pub fn settle(&mut self, now_ns: u64, all: bool) -> (Vec<SettledSync>, Vec<Charge>) {
        let mut charges: Vec<Charge> = Vec::new();
        while let Some(write) = self.pending.front() {
            if !all && write.completed_ns.saturating_add(GRACE_NS) > now_ns {
                break;
            }
            let write = self.pending.pop_front().unwrap_or_else(|| unreachable!());
            self.charge(&write, &mut charges);
        }
        let (mut settled, open): (Vec<SettledSync>, Vec<SettledSync>) =
            std::mem::take(&mut self.open)
                .into_iter()
                .partition(|s| all || s.call.end_ns.saturating_add(SETTLE_NS) <= now_ns);
        self.open = open;
        settled.sort_by_key(|s| (s.call.end_ns, s.call.tid));
        for sync in &mut settled {
            (sync.own_bytes, sync.own_flushes) = self.claim_own(&sync.call);
        }
        let horizon = now_ns.saturating_sub(OWN_WRITES_EXPIRE_NS);
        self.own.retain(|_, w| !all && w.last_ns >= horizon);
        (settled, charges)
    }

    /// The bytes and flushes of the thread's own writes created during `call`.
    fn claim_own(&mut self, call: &SyncCall) -> (u64, u64) {
        let Some(own) = self.own.get_mut(&call.tid) else {
            return (0, 0);
        };
        let claimed = own.settle(call);
        if own.is_empty() {
            self.own.remove(&call.tid);
        }
        claimed
    }

    /// Splits `write` among the open calls it was created during.
    fn charge(&mut self, write: &PendingWrite, charges: &mut Vec<Charge>) {
        let end = self
            .open
            .partition_point(|s| s.call.start_ns <= write.created_ns);
        let earliest = write.created_ns.saturating_sub(self.longest_ns);
        let waiting: Vec<usize> = (0..end)
            .rev()
            .take_while(|&i| self.open[i].call.start_ns >= earliest)
            .filter(|&i| {
                let c = &self.open[i].call;
                c.kind.commits_journal()
                    && write.created_ns <= c.end_ns
                    && c.tgid != write.tgid
                    && c.dev.is_none_or(|dev| dev == write.dev)
            })
            .collect();
        let Some(n) = u64::try_from(waiting.len()).ok().filter(|&n| n > 0) else {
            return;
        };
        if write.flush {
            // Counted once, to the oldest call it served.
            if let Some(&i) = waiting.last() {
                self.open[i].charged_flushes += 1;
            }
            return;
        }
        // Even split, oldest call first; the first takes the remainder so bytes add up.
        for (k, &i) in waiting.iter().rev().enumerate() {
            let share = write.bytes / n + if k == 0 { write.bytes % n } else { 0 };
            let sync = &mut self.open[i];
            sync.charged_bytes += share;
            add_party(&mut sync.charged_by, write.tgid, write.comm, share);
            let (to_tgid, to_comm) = (sync.call.tgid, sync.call.comm);
            match charges
                .iter_mut()
                .find(|c| c.from_tgid == write.tgid && c.to_tgid == to_tgid)
            {
                Some(c) => c.bytes += share,
                None => charges.push(Charge {
                    from_tgid: write.tgid,
                    from_comm: write.comm,
                    to_tgid,
                    to_comm,
                    bytes: share,
                }),
            }
        }
    }
}

/// Adds `bytes` by `tgid` to a short list of parties, biggest first.
fn add_party(parties: &mut Vec<(u32, Comm, u64)>, tgid: u32, comm: Comm, bytes: u64) {
    if let Some(p) = parties.iter_mut().find(|p| p.0 == tgid) {
        p.2 += bytes;
    } else if parties.len() < MAX_CHARGED_BY {
        parties.push((tgid, comm, bytes));
    }
    // A fifth writer for one call is not named: its bytes still count in the call's total.
    parties.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FileRef, SyncKind};

    const MS: u64 = 1_000_000;
    const LOOP0: Dev = Dev::new(7, 0);

    fn write(
        tgid: u32,
        comm: &str,
        at_ms: u64,
        bytes: u32,
        kthread: bool,
        in_sync: bool,
    ) -> BlockIo {
        BlockIo {
            dev: LOOP0,
            sector: 0,
            bytes,
            op: Op::Write,
            flags: if in_sync {
                iotop_bpf_common::block::FLAG_IN_SYNC
            } else {
                0
            },
            tgid,
            tid: tgid,
            comm: Comm::new(comm),
            created_ns: at_ms * MS,
            issued_ns: at_ms * MS,
            completed_ns: at_ms * MS + MS,
            error: 0,
            kernel_thread: kthread,
            cgroup: 0,
            dirtier: None,
        }
    }

    fn journal_write(at_ms: u64, bytes: u32) -> BlockIo {
        write(300, "jbd2/loop0-8", at_ms, bytes, true, false)
    }

    fn fsync(tgid: u32, from_ms: u64, to_ms: u64, dev: Option<Dev>) -> SyncCall {
        SyncCall {
            tgid,
            tid: tgid,
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
            fs_block_size: 4096,
            fs_dev: None,
            ino: 0,
            name: String::new(),
            dir: false,
        }
    }

    #[test]
    fn one_call_gets_its_own_writes_and_the_journal_it_waited_for() {
        let mut ledger = SyncLedger::default();
        ledger.note_write(&write(42, "lab001", 6, 4096, false, true));
        ledger.note_write(&journal_write(10, 8192));
        ledger.note_sync(&fsync(42, 5, 20, Some(LOOP0)));
        let (settled, charges) = ledger.settle(200 * MS, false);
        assert!(
            settled.is_empty() && charges.is_empty(),
            "still within the grace period"
        );
        assert!(ledger.has_open(42));
        let (settled, charges) = ledger.settle(2_000 * MS, false);
        assert_eq!(settled.len(), 1);
        assert_eq!(
            (settled[0].own_bytes, settled[0].charged_bytes),
            (4096, 8192)
        );
        assert_eq!(settled[0].charged_by[0].0, 300);
        assert_eq!(
            (charges[0].from_tgid, charges[0].to_tgid, charges[0].bytes),
            (300, 42, 8192)
        );
        assert!(!ledger.has_open(42));
        let (settled, charges) = ledger.settle(3_000 * MS, false);
        assert!(settled.is_empty() && charges.is_empty(), "settled once");
    }

    #[test]
    fn group_commit_splits_the_bytes_among_the_calls() {
        let mut ledger = SyncLedger::default();
        ledger.note_write(&journal_write(10, 12_289));
        ledger.note_sync(&fsync(1, 5, 20, Some(LOOP0)));
        ledger.note_sync(&fsync(2, 8, 30, None));
        ledger.note_sync(&fsync(3, 9, 15, Some(LOOP0)));
        let (settled, charges) = ledger.settle(0, true);
        let total: u64 = settled.iter().map(|s| s.charged_bytes).sum();
        assert_eq!(total, 12_289, "nothing lost to rounding");
        assert_eq!(charges.iter().map(|c| c.bytes).sum::<u64>(), 12_289);
        assert!(settled.iter().all(|s| s.charged_bytes >= 4_096));
    }

    #[test]
    fn other_disks_other_times_data_only_calls_and_user_writes_are_not_charged() {
        let mut ledger = SyncLedger::default();
        ledger.note_write(&journal_write(10, 4096));
        ledger.note_sync(&fsync(1, 11, 20, Some(LOOP0))); // began after the write was created
        ledger.note_sync(&fsync(2, 5, 20, Some(Dev::new(8, 0)))); // another disk
        let mut range = fsync(3, 5, 20, Some(LOOP0));
        range.kind = SyncKind::SyncFileRange;
        ledger.note_sync(&range);
        ledger.note_write(&write(9, "dd", 10, 4096, false, false));
        let (settled, charges) = ledger.settle(0, true);
        assert!(charges.is_empty());
        assert!(settled.iter().all(|s| s.device_bytes() == 0));
    }

    #[test]
    fn own_writes_belong_to_the_thread_that_made_them() {
        let mut ledger = SyncLedger::default();
        ledger.note_write(&write(42, "lab001", 6, 4096, false, true));
        ledger.note_write(&write(43, "other", 6, 8192, false, true));
        ledger.note_sync(&fsync(42, 5, 20, Some(LOOP0)));
        let (settled, _) = ledger.settle(0, true);
        assert_eq!(settled[0].own_bytes, 4096);
    }

    #[test]
    fn a_long_call_far_back_is_still_found() {
        let mut ledger = SyncLedger::default();
        ledger.note_sync(&fsync(1, 0, 10_000, Some(LOOP0)));
        for t in 1..50u32 {
            let at = 9_000 + u64::from(t);
            ledger.note_sync(&fsync(100 + t, at, at, Some(LOOP0)));
        }
        ledger.note_write(&journal_write(5_000, 4096));
        let (settled, _) = ledger.settle(0, true);
        let long = settled.iter().find(|s| s.call.tgid == 1).unwrap();
        assert_eq!(long.charged_bytes, 4096);
    }

    #[test]
    fn a_fast_syncer_gets_its_own_writes_whatever_the_settling_lag() {
        // An O_DSYNC logger on XFS: ~20,000 syncs a second by one thread, each writing a
        // data block and a log block itself. Calls settle `SETTLE_NS` after they end, at the
        // interval's tick, so over a second of its own writes wait for their calls: every
        // call must still get exactly its two (the figure must not depend on how many wait).
        let mut ledger = SyncLedger::default();
        let mut settled = Vec::new();
        let mut next_tick = 500 * MS;
        for i in 0..60_000u64 {
            let start = i * 50_000;
            if start >= next_tick {
                settled.extend(ledger.settle(next_tick, false).0);
                next_tick += 500 * MS;
            }
            let mut data = write(42, "python3", 0, 4096, false, true);
            data.created_ns = start + 5_000;
            let mut log = data;
            log.created_ns = start + 20_000;
            ledger.note_write(&data);
            ledger.note_write(&log);
            let mut call = fsync(42, 0, 0, Some(LOOP0));
            (call.start_ns, call.end_ns) = (start, start + 40_000);
            ledger.note_sync(&call);
        }
        settled.extend(ledger.settle(next_tick + 1_000 * MS, true).0);
        assert_eq!(settled.len(), 60_000);
        let wrong: Vec<(u64, u64)> = settled
            .iter()
            .filter(|s| s.own_bytes != 8192)
            .map(|s| (s.call.start_ns, s.own_bytes))
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "calls with the wrong own bytes: {wrong:?}"
        );
    }

    #[test]
    fn a_write_completing_after_its_call_returned_is_still_its_own() {
        // sync_file_range(WRITE) returns before its write completes: the write's record comes
        // after the call's, and after the thread's next call's; it is the first call's.
        let mut ledger = SyncLedger::default();
        let mut first = fsync(42, 10, 11, Some(LOOP0));
        first.kind = SyncKind::SyncFileRangeWrite;
        ledger.note_sync(&first);
        let next = fsync(42, 20, 21, Some(LOOP0));
        ledger.note_write(&write(42, "git", 21, 512, false, true)); // the next call's
        ledger.note_sync(&next);
        ledger.note_write(&write(42, "git", 10, 4096, false, true)); // late: the first's
        let (settled, _) = ledger.settle(0, true);
        let own: Vec<u64> = settled.iter().map(|s| s.own_bytes).collect();
        assert_eq!(own, vec![4096, 512]);
    }

    #[test]
    fn waiting_state_is_bounded() {
        let mut ledger = SyncLedger::default();
        for i in 0..(MAX_PENDING_WRITES as u64 + 10) {
            ledger.note_write(&journal_write(i, 512));
        }
        assert_eq!(ledger.pending.len(), MAX_PENDING_WRITES);
        for tid in 0..(MAX_THREADS_WITH_OWN_WRITES as u32 + 10) {
            ledger.note_write(&write(tid + 1, "x", 1, 512, false, true));
        }
        assert!(ledger.own.len() <= MAX_THREADS_WITH_OWN_WRITES);
        // Threads whose sync record never came are forgotten with time.
        ledger.settle(60_000 * MS, false);
        assert!(ledger.own.is_empty());
    }
}
