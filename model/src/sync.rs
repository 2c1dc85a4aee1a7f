//! A process's sync calls over a period: how often, how long, what files, and (once settled)
//! what each call cost, split into two populations of calls so that a few big syncs cannot
//! hide many small ones.

use std::collections::BTreeMap;

mod commit;
pub(super) use commit::Commits;
use commit::Role;

use super::{
    Comm, Dev, SyncCall, SyncKind,
    hist::{Histogram, Latency},
    ledger::{Charge, SettledSync},
    snapshot::{Party, SyncFigures, SyncPopulation, SyncedFiles},
};

/// Synced files remembered per period (the most synced).
const MAX_FILES: usize = 8;
/// Counterparties remembered per period; the rest are summed into one "other" entry.
const MAX_PARTIES: usize = 8;
/// Disks of synced files remembered per period.
const MAX_DISKS: usize = 4;

#[derive(Clone, Debug, Default)]
pub(super) struct SyncPeriod {
    calls: u64,
    /// `sync_file_range` calls that only started write-back.
    writeback_starts: u64,
    errors: u64,
    latency: Histogram,
    window_bytes: u64,
    window_writes: u64,
    kinds: BTreeMap<SyncKind, u64>,
    /// Kinds of the calls settled in the period (a period may settle calls made in the
    /// previous one and make none of its own).
    settled_kinds: BTreeMap<SyncKind, u64>,
    /// The files synced, most synced first.
    files: FileTally,
    /// The files the judged settled calls synced (what findings on settled calls name).
    settled_files: FileTally,
    /// The files the small settled calls synced (the ones the amplification is about).
    small_files: FileTally,
    /// The files the empty settled calls synced.
    empty_files: FileTally,
    /// Cache flushes the empty settled calls issued.
    empty_flushes: u64,
    /// Settled calls judged as part of the commit before them (`commit`).
    commit_records: u64,
    /// Small settled calls whose payload the calling thread wrote by direct I/O just before
    /// (a log block, then fdatasync: a per-row commit's flush).
    direct_pairs: u64,
    /// Calls per disk of the synced file (the most synced first, a few kept).
    disks: Vec<(Dev, u64)>,
    /// The calls settled in the period, judged together (calls are settled up to
    /// `SETTLE_NS` after they end, so a burst is judged in one piece).
    settled: Settled,
    small: SyncPopulation,
    large: SyncPopulation,
    /// Settled calls whose payload is not measured (io_uring: its writes are not system
    /// calls the probes count).
    unmeasured: SyncPopulation,
    /// Settled fsyncs of directories: the names of new files made durable (maildir, an
    /// installer). Their cost belongs to the files' (see `SyncFigures::amplification`).
    dirs: SyncPopulation,
    /// Settled calls that made nothing durable (nothing written to the fd since its last
    /// sync, or a call without a file).
    empty: u64,
    /// Settled `sync_file_range` calls since the last settled sync that commits: the write-back
    /// they started is made durable by the next fsync, whatever its file (git's batch mode
    /// fsyncs an empty marker file to flush the lot). Kept within the period.
    writeouts_pending: u64,
    in_sync_write_bytes: u64,
    /// Block size of the filesystem of the most recent call that knew it.
    fs_block_size: u32,
    charged_from: Parties,
    on_behalf_of: Parties,
}

/// Files by calls, bounded to the most synced [`MAX_FILES`], with what did not fit: a
/// program syncing hundreds of files once each (an installer) is not described by the few
/// it synced most.
#[derive(Clone, Debug, Default)]
struct FileTally {
    /// (path, calls), most synced first.
    top: Vec<(String, u64)>,
    /// Calls on files not in `top`.
    elsewhere: u64,
    /// The files of the latest calls, two at most, distinct, newest first.
    recent: Vec<String>,
}

impl FileTally {
    fn add(&mut self, path: &str, calls: u64) {
        self.count(path, calls);
        self.note_recent(path);
    }

    fn note_recent(&mut self, path: &str) {
        self.recent.retain(|p| p != path);
        self.recent.insert(0, path.to_string());
        self.recent.truncate(2);
    }

    fn count(&mut self, path: &str, calls: u64) {
        if let Some(entry) = self.top.iter_mut().find(|(p, _)| p == path) {
            entry.1 += calls;
        } else if self.top.len() < MAX_FILES {
            self.top.push((path.to_string(), calls));
        } else if let Some(last) = self.top.last_mut()
            && last.1 < calls
        {
            // Replace the least synced when the newcomer has more calls.
            self.elsewhere += last.1;
            *last = (path.to_string(), calls);
        } else {
            self.elsewhere += calls;
        }
        self.top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }

    fn merge(&mut self, other: &Self) {
        for (path, n) in &other.top {
            self.count(path, *n);
        }
        self.elsewhere += other.elsewhere;
        for path in other.recent.iter().rev() {
            self.note_recent(path);
        }
    }
}

/// What the settled calls of a period cost, besides their populations.
#[derive(Clone, Debug, Default)]
struct Settled {
    calls: u64,
    /// Payload per call (bytes).
    payload: Histogram,
    /// Time spent in them, summed over threads.
    time_ns: u64,
    /// When the first began and the last ended: the stretch of time the process spent
    /// syncing (a short-lived process syncs for a fraction of an interval).
    first_start_ns: u64,
    last_end_ns: u64,
}

impl Settled {
    /// `payload`: what the call made durable (for a call whose payload is not measured, what
    /// it wrote itself stands for it).
    fn add(&mut self, call: &SyncCall, payload: u64) {
        self.first_start_ns = if self.calls == 0 {
            call.start_ns
        } else {
            self.first_start_ns.min(call.start_ns)
        };
        self.last_end_ns = self.last_end_ns.max(call.end_ns);
        self.calls += 1;
        self.payload.record(payload);
        self.time_ns = self.time_ns.saturating_add(call.latency_ns());
    }

    fn merge(&mut self, other: &Self) {
        if other.calls == 0 {
            return;
        }
        self.first_start_ns = if self.calls == 0 {
            other.first_start_ns
        } else {
            self.first_start_ns.min(other.first_start_ns)
        };
        self.last_end_ns = self.last_end_ns.max(other.last_end_ns);
        self.calls += other.calls;
        self.time_ns = self.time_ns.saturating_add(other.time_ns);
    }
}

/// Counterparties by bytes, bounded: past [`MAX_PARTIES`] the smallest is folded into
/// `other_bytes`.
#[derive(Clone, Debug, Default)]
pub(super) struct Parties {
    by_tgid: BTreeMap<u32, (Comm, u64)>,
    other_bytes: u64,
}

impl Parties {
    pub(super) fn add(&mut self, tgid: u32, comm: Comm, bytes: u64) {
        if let Some(entry) = self.by_tgid.get_mut(&tgid) {
            entry.0 = comm;
            entry.1 += bytes;
            return;
        }
        self.by_tgid.insert(tgid, (comm, bytes));
        if self.by_tgid.len() > MAX_PARTIES
            && let Some((&smallest, _)) = self.by_tgid.iter().min_by_key(|(_, (_, b))| *b)
            && let Some((_, b)) = self.by_tgid.remove(&smallest)
        {
            self.other_bytes += b;
        }
    }

    pub(super) fn merge(&mut self, other: &Self) {
        for (&tgid, &(comm, bytes)) in &other.by_tgid {
            self.add(tgid, comm, bytes);
        }
        self.other_bytes += other.other_bytes;
    }

    pub(super) fn total(&self) -> u64 {
        self.by_tgid.values().map(|(_, b)| b).sum::<u64>() + self.other_bytes
    }

    pub(super) fn figures(&self) -> Vec<Party> {
        let mut parties: Vec<Party> = self
            .by_tgid
            .iter()
            .map(|(&tgid, (comm, bytes))| Party {
                tgid,
                comm: comm.to_string(),
                bytes: *bytes,
            })
            .collect();
        parties.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.tgid.cmp(&b.tgid)));
        if self.other_bytes > 0 {
            parties.push(Party {
                tgid: 0,
                comm: "(others)".to_string(),
                bytes: self.other_bytes,
            });
        }
        parties
    }
}

impl SyncPopulation {
    fn add(&mut self, sync: &SettledSync, payload: u64) {
        self.calls += 1;
        self.payload_bytes += payload;
        self.payload_writes += sync.call.window_writes;
        self.flushes += sync.own_flushes + sync.charged_flushes;
        self.own_bytes += sync.own_bytes;
        self.ahead_bytes += sync.ahead_bytes;
        self.charged_bytes += sync.charged_bytes;
        self.max_payload = self.max_payload.max(payload);
        self.min_payload = if self.calls == 1 {
            payload
        } else {
            self.min_payload.min(payload)
        };
        if sync.call.fs_block_size != 0 {
            self.fs_block_size = sync.call.fs_block_size;
        }
    }

    /// A commit's record: its payload and cost are the commit's, which is counted already.
    fn add_to_commit(&mut self, sync: &SettledSync, payload: u64) {
        self.payload_bytes += payload;
        self.payload_writes += sync.call.window_writes;
        self.flushes += sync.own_flushes + sync.charged_flushes;
        self.own_bytes += sync.own_bytes;
        self.ahead_bytes += sync.ahead_bytes;
        self.charged_bytes += sync.charged_bytes;
    }

    fn merge(&mut self, other: &Self) {
        if other.calls == 0 {
            return;
        }
        self.min_payload = if self.calls == 0 {
            other.min_payload
        } else {
            self.min_payload.min(other.min_payload)
        };
        self.calls += other.calls;
        self.payload_bytes += other.payload_bytes;
        self.payload_writes += other.payload_writes;
        self.flushes += other.flushes;
        self.own_bytes += other.own_bytes;
        self.ahead_bytes += other.ahead_bytes;
        self.charged_bytes += other.charged_bytes;
        self.max_payload = self.max_payload.max(other.max_payload);
        if other.fs_block_size != 0 {
            self.fs_block_size = other.fs_block_size;
        }
    }
}

/// The kind with the most calls (the first kind on a tie).
fn most_frequent(kinds: &BTreeMap<SyncKind, u64>) -> Option<SyncKind> {
    kinds
        .iter()
        .max_by_key(|&(kind, n)| (*n, std::cmp::Reverse(*kind)))
        .map(|(kind, _)| *kind)
}

/// Whether a settled call's cost is judged as a sync's (its populations, the amplification
/// and storm findings). Not write-back initiation, which makes nothing durable, nor
/// `sync_file_range` even when it waits (git's writeout-only and batch modes, dpkg): it writes
/// the file's dirty data pages, which write-back would write anyway, and commits no journal
/// and flushes no cache; the block a small file costs it is no cost of syncing. Its calls
/// still count as syncs (rate, latency, kinds).
fn judged(kind: SyncKind) -> bool {
    kind.is_durable() && kind.commits_journal()
}

/// Whether a settled call made less than one filesystem block durable (`window`: see
/// [`window_of`]; it still writes at least a whole block). A call on a filesystem of unknown
/// block size is never small.
fn is_small(call: &SyncCall, window: u64) -> bool {
    call.fs_block_size != 0 && window < u64::from(call.fs_block_size)
}

/// What a settled call made durable of what its process wrote: the bytes written to its file
/// since its previous sync; for `msync`, which has no fd and no write calls (the process
/// stores into the mapping), the dirty pages of its range, which it wrote itself.
fn window_of(sync: &SettledSync) -> u64 {
    if sync.call.kind == SyncKind::Msync {
        sync.own_bytes
    } else {
        sync.call.window_bytes
    }
}

impl SyncPeriod {
    pub(super) fn add_call(&mut self, call: &SyncCall) {
        // Write-back initiation makes nothing durable: counted apart, never judged as a sync.
        if !call.kind.is_durable() {
            self.writeback_starts += 1;
            return;
        }
        self.calls += 1;
        if call.ret < 0 {
            self.errors += 1;
        }
        self.latency.record(call.latency_ns());
        self.window_bytes += call.window_bytes;
        self.window_writes += call.window_writes;
        *self.kinds.entry(call.kind).or_default() += 1;
        if call.fs_block_size != 0 {
            self.fs_block_size = call.fs_block_size;
        }
        if let Some(name) = call.file.name() {
            self.files.add(&name, 1);
        }
        if let Some(dev) = call.dev {
            self.add_disk(dev, 1);
        }
    }

    fn add_disk(&mut self, dev: Dev, calls: u64) {
        if let Some(entry) = self.disks.iter_mut().find(|(d, _)| *d == dev) {
            entry.1 += calls;
        } else if self.disks.len() < MAX_DISKS {
            self.disks.push((dev, calls));
        }
        self.disks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }

    /// The call's cost, once settled; `commits` is its process's latest commit per thread.
    pub(super) fn add_settled(&mut self, sync: &SettledSync, commits: &mut Commits) {
        if !judged(sync.call.kind) {
            // Its writes were the process's own doing, started by the call.
            self.in_sync_write_bytes += sync.own_bytes;
            if sync.call.kind.is_sync_file_range() {
                self.writeouts_pending += 1;
            }
            return;
        }
        let flushes_writeouts = std::mem::take(&mut self.writeouts_pending) > 0;
        // A directory's payload (its entries) is no write a window counts.
        let measured = sync.call.kind.payload_measured() && !sync.call.dir;
        let window = window_of(sync);
        // A commit with nothing of its own that made the write-outs of sync_file_range
        // durable (git's batch flush): those are its payload.
        let flushed_ahead = measured && window == 0 && sync.ahead_bytes > 0;
        let payload = if sync.call.dir {
            // A name made durable is no data: its cost (the log tree's on btrfs) must not
            // pass for payload and make a storm of tiny commits look like big ones.
            0
        } else if flushed_ahead {
            sync.ahead_bytes
        } else if measured {
            window
        } else {
            sync.own_bytes
        };
        let role = commits.role(sync, (measured || sync.call.dir).then_some(payload));
        // The pair: a payload written by the thread's own direct I/O just before a sync that
        // then only flushes, sub-block or rewriting the block the previous one wrote (InnoDB's
        // redo log block, filled commit by commit). Its device writes are those direct
        // writes. New whole blocks written so are not a pair: each commit writes whole blocks
        // of its own, nothing is rewritten in pieces, and the flush alone is `flush_heavy`'s.
        let paired;
        let sync = if measured
            && !sync.call.kind.is_write()
            && sync.own_bytes == 0
            && sync.direct_bytes > 0
            && window > 0
            && (is_small(&sync.call, window) || sync.direct_rewrite)
        {
            self.direct_pairs += 1;
            paired = SettledSync {
                own_bytes: sync.direct_bytes,
                ..sync.clone()
            };
            &paired
        } else {
            sync
        };
        self.settled.add(&sync.call, payload);
        *self.settled_kinds.entry(sync.call.kind).or_default() += 1;
        if let Some(name) = sync.call.file.name() {
            self.settled_files.add(&name, 1);
        }
        if sync.call.fs_block_size != 0 {
            self.fs_block_size = sync.call.fs_block_size;
        }
        if self.calls == 0 {
            // A period with settled calls but none of its own (they ended just before it)
            // still names what they synced.
            if let Some(name) = sync.call.file.name() {
                self.files.add(&name, 1);
            }
            if let Some(dev) = sync.call.dev {
                self.add_disk(dev, 1);
            }
        }
        // What was written ahead counted when its sync_file_range settled.
        self.in_sync_write_bytes += sync.own_bytes - sync.ahead_bytes;
        if role == Role::Companion {
            // Its commit's record: judged with the data it commits (a large commit).
            self.commit_records += 1;
            self.large.add_to_commit(sync, payload);
        } else if sync.call.dir {
            self.dirs.add(sync, payload);
        } else if !measured {
            self.unmeasured.add(sync, sync.call.window_bytes);
        } else if flushed_ahead {
            if payload < u64::from(sync.call.fs_block_size) {
                self.small.add(sync, payload);
            } else {
                self.large.add(sync, payload);
            }
        } else if window == 0 && flushes_writeouts {
            // Nothing of its own, but it makes the write-back started before durable (of
            // files the probes did not name): its payload is theirs, which no window of its
            // file measures.
            self.unmeasured.add(sync, 0);
        } else if window == 0 {
            self.empty += 1;
            self.empty_flushes += sync.own_flushes + sync.charged_flushes;
            if let Some(name) = sync.call.file.name() {
                self.empty_files.add(&name, 1);
            }
        } else if is_small(&sync.call, window) {
            self.small.add(sync, payload);
            if let Some(name) = sync.call.file.name() {
                self.small_files.add(&name, 1);
            }
        } else {
            self.large.add(sync, payload);
        }
    }

    pub(super) fn add_charge_received(&mut self, charge: &Charge) {
        self.charged_from
            .add(charge.from_tgid, charge.from_comm, charge.bytes);
    }

    pub(super) fn add_charge_given(&mut self, charge: &Charge) {
        self.on_behalf_of
            .add(charge.to_tgid, charge.to_comm, charge.bytes);
    }

    pub(super) fn merge(&mut self, other: &Self) {
        self.calls += other.calls;
        self.writeback_starts += other.writeback_starts;
        self.settled.merge(&other.settled);
        self.errors += other.errors;
        self.latency.merge(&other.latency);
        self.window_bytes += other.window_bytes;
        self.window_writes += other.window_writes;
        for (&kind, &n) in &other.kinds {
            *self.kinds.entry(kind).or_default() += n;
        }
        for (&kind, &n) in &other.settled_kinds {
            *self.settled_kinds.entry(kind).or_default() += n;
        }
        self.files.merge(&other.files);
        self.settled_files.merge(&other.settled_files);
        self.small_files.merge(&other.small_files);
        for &(dev, n) in &other.disks {
            self.add_disk(dev, n);
        }
        self.small.merge(&other.small);
        self.large.merge(&other.large);
        self.unmeasured.merge(&other.unmeasured);
        self.dirs.merge(&other.dirs);
        self.empty += other.empty;
        self.empty_flushes += other.empty_flushes;
        self.commit_records += other.commit_records;
        self.direct_pairs += other.direct_pairs;
        self.empty_files.merge(&other.empty_files);
        self.in_sync_write_bytes += other.in_sync_write_bytes;
        if other.fs_block_size != 0 {
            self.fs_block_size = other.fs_block_size;
        }
        self.charged_from.merge(&other.charged_from);
        self.on_behalf_of.merge(&other.on_behalf_of);
    }

    pub(super) fn figures(&self) -> SyncFigures {
        SyncFigures {
            syncs: self.calls,
            writeback_starts: self.writeback_starts,
            errors: self.errors,
            latency: Latency::of(&self.latency),
            hist: self.latency.log2(),
            time_ns: self.latency.sum(),
            settled_time_ns: self.settled.time_ns,
            settled_payload: self.settled.payload.clone(),
            settled_span_ns: self
                .settled
                .last_end_ns
                .saturating_sub(self.settled.first_start_ns),
            window_bytes: self.window_bytes,
            window_writes: self.window_writes,
            kind: most_frequent(if self.kinds.is_empty() {
                &self.settled_kinds
            } else {
                &self.kinds
            })
            .map_or("sync", SyncKind::name),
            kinds: self
                .kinds
                .iter()
                .map(|(kind, &n)| (kind.name(), n))
                .collect(),
            files: self.files.top.clone(),
            files_elsewhere: self.files.elsewhere,
            files_recent: self.files.recent.clone(),
            settled_files: SyncedFiles {
                top: self.settled_files.top.clone(),
                elsewhere: self.settled_files.elsewhere,
                recent: self.settled_files.recent.clone(),
            },
            small_files: self.small_files.top.clone(),
            small_files_elsewhere: self.small_files.elsewhere,
            small_files_recent: self.small_files.recent.clone(),
            disk: self.disks.first().map(|(dev, _)| *dev),
            fs_block_size: self.fs_block_size,
            small: self.small,
            large: self.large,
            unmeasured: self.unmeasured,
            dirs: self.dirs,
            empty: self.empty,
            empty_flushes: self.empty_flushes,
            commit_records: self.commit_records,
            direct_pairs: self.direct_pairs,
            empty_files: self.empty_files.top.clone(),
            in_sync_write_bytes: self.in_sync_write_bytes,
            charged_write_bytes: self.charged_from.total(),
            charged_from: self.charged_from.figures(),
            on_behalf_of: self.on_behalf_of.figures(),
        }
    }
}
