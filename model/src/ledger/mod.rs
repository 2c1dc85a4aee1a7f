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
//! - **Written ahead**: `sync_file_range` starts a file's write-back and commits nothing (dpkg
//!   and git's batch mode call it on each file, then fsync later). The device writes it made
//!   itself are part of what the file's next committing sync makes durable, so they are
//!   carried, by process and file (inode), to that sync's own writes: a small file's fsync
//!   costs its data block even though the block went out before the call.
//! - A call is settled [`SETTLE_NS`] after it ended, once every write that could be charged to
//!   it has been: its [`SettledSync`] carries the whole cost of that one call.
//!
//! Limits (docs/sync.md): background write-back that overlaps a sync is charged to it; a commit
//! that began before the sync is not; a write completing more than `GRACE_NS` after a call
//! ended reaches the callers' totals but not the call's own cost.
//!
//! Time is the model's: writes and calls carry kernel timestamps, settling happens at the
//! samples' `now_ns`, so a replay settles exactly as the live run did.

mod ahead;

use super::FastMap;
use ahead::WrittenAhead;
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

/// A thread's direct writes since its previous sync.
#[derive(Clone, Copy, Debug, Default)]
struct DirectSince {
    bytes: u64,
    /// When the latest was created.
    at_ns: u64,
    /// Where the first began (disk, sector), and where the previous sync's first began.
    first: Option<(Dev, u64)>,
    before: Option<(Dev, u64)>,
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
    /// Bytes of write requests the calling thread created inside the call, and those the
    /// process's `sync_file_range` calls wrote out of the same file before it.
    pub own_bytes: u64,
    /// Of `own_bytes`, those written out ahead of the call by `sync_file_range`.
    pub ahead_bytes: u64,
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
    /// Bytes of write requests the calling thread created itself, outside any sync call,
    /// since its previous sync and before this one began: direct I/O (a thread's buffered
    /// writes reach the device through flushers). A database that writes its log block by
    /// O_DIRECT and then fdatasyncs made durable what those requests wrote.
    pub direct_bytes: u64,
    /// Those direct writes began where the thread's direct writes before its previous sync
    /// began: it rewrote the same block (a log block filled commit by commit).
    pub direct_rewrite: bool,
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
    /// Per thread: the write requests it created outside sync calls since its previous sync
    /// (direct I/O).
    direct: FastMap<u32, DirectSince>,
    pending: VecDeque<PendingWrite>,
    /// Calls waiting to be settled, sorted by start.
    open: Vec<SettledSync>,
    /// The longest call seen: how far back from a write's creation an open call may start.
    longest_ns: u64,
    /// Files written out by `sync_file_range`, waiting for the sync that makes them durable.
    ahead: WrittenAhead,
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
        } else if !io.kernel_thread && !io.in_sync() && !flush && io.dirtier.is_none() {
            if self.direct.len() >= MAX_THREADS_WITH_OWN_WRITES
                && !self.direct.contains_key(&io.tid)
            {
                let horizon = io.created_ns.saturating_sub(OWN_WRITES_EXPIRE_NS);
                self.direct.retain(|_, d| d.at_ns >= horizon);
            }
            if self.direct.len() < MAX_THREADS_WITH_OWN_WRITES || self.direct.contains_key(&io.tid)
            {
                let entry = self.direct.entry(io.tid).or_default();
                entry.bytes = entry.bytes.saturating_add(u64::from(io.bytes));
                entry.at_ns = entry.at_ns.max(io.created_ns);
                entry.first.get_or_insert((io.dev, io.sector));
            }
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
        // The thread's direct writes before the call (a sync's record comes after its
        // thread's earlier requests completed: a direct write waits for its request).
        let (direct_bytes, direct_rewrite) = match self.direct.get_mut(&call.tid) {
            Some(d) if d.bytes > 0 && d.at_ns <= call.start_ns => {
                let rewrite = d.first.is_some() && d.first == d.before;
                let taken = (d.bytes, rewrite);
                d.before = d.first.take();
                d.bytes = 0;
                taken
            }
            _ => (0, false),
        };
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
                ahead_bytes: 0,
                own_flushes: 0,
                charged_bytes: 0,
                charged_flushes: 0,
                charged_by: Vec::new(),
                direct_bytes,
                direct_rewrite,
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
        // In the order they ended: a file's write-out comes before the sync that waits for it.
        for sync in &mut settled {
            (sync.own_bytes, sync.own_flushes) = self.claim_own(&sync.call);
            self.carry_written_ahead(sync);
        }
        let horizon = now_ns.saturating_sub(OWN_WRITES_EXPIRE_NS);
        self.own.retain(|_, w| !all && w.last_ns >= horizon);
        self.ahead.expire(if all {
            u64::MAX
        } else {
            now_ns.saturating_sub(ahead::EXPIRE_NS)
        });
        (settled, charges)
    }

    /// A `sync_file_range` leaves what it wrote of its file for the next committing sync of
    /// the same process that makes it durable, which takes it into its own writes: the
    /// file's own fsync, or a commit with nothing of its own to make durable (a batch flush:
    /// it makes every file written out before durable).
    fn carry_written_ahead(&mut self, sync: &mut SettledSync) {
        let call = &sync.call;
        let file = call
            .fs_dev
            .filter(|_| call.ino != 0)
            .map(|dev| (call.tgid, dev, call.ino));
        if call.kind.is_sync_file_range() {
            if let Some(key) = file
                && sync.own_bytes > 0
            {
                self.ahead.add(key, sync.own_bytes, call.end_ns);
            }
            return;
        }
        if !call.kind.commits_journal() || call.dir {
            return;
        }
        let mut ahead = file.map_or(0, |key| self.ahead.take_file(key));
        if ahead == 0 && call.window_bytes == 0 {
            ahead = self.ahead.take_process(call.tgid);
        }
        sync.ahead_bytes = ahead;
        sync.own_bytes = sync.own_bytes.saturating_add(ahead);
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
mod tests;
